"""Build, run, save/load round trips and the engine's descriptions."""
import pickle
import threading
import time

import numpy as np
import pytest

import kiln
from conftest import SAMPLE_CNN, mlp_model, two_input_model


def test_build_from_path_bytes_and_modelproto(mlp, tmp_path, rng):
    model, reference = mlp
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.standard_normal((4, 6)).astype(np.float32)
    for source in (str(path), path, model.SerializeToString(), model):
        engine = kiln.build(source, shapes={"x": (4, 6)})
        y = engine.create_execution_context().run({"x": x})["y"]
        assert y.dtype == np.float32 and y.shape == (4, 3)
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_descriptions(mlp_engine):
    e = mlp_engine
    assert [d.name for d in e.inputs] == ["x"] and [d.name for d in e.outputs] == ["y"]
    assert e.inputs[0].dtype == "float32" and e.inputs[0].shape == (4, 6)
    assert e.outputs[0].shape == (4, 3)
    assert e.device == "cpu"
    assert len(e.layers) == e.summary.layers > 0
    assert all(isinstance(layer.op, str) and layer.tactic for layer in e.layers)
    assert e.summary.nodes_imported == 5 and e.summary.build_seconds > 0
    text = e.describe()
    assert "x" in text and "y" in text
    assert "kiln.Engine(device='cpu'" in repr(e) and "TensorDesc(name='x'" in repr(e.inputs[0])


def test_dynamic_batch_profile(mlp, rng):
    model, reference = mlp
    engine = kiln.build(model, min_shapes={"x": (1, 6)}, opt_shapes={"x": (4, 6)}, max_shapes={"x": (8, 6)})
    assert engine.inputs[0].shape == (None, 6) and engine.inputs[0].dim_names[0] == "N"
    assert engine.profiles[0].inputs["x"] == ((1, 6), (4, 6), (8, 6))
    ctx = engine.create_execution_context()
    for batch in (1, 8, 3, 3):
        x = rng.standard_normal((batch, 6)).astype(np.float32)
        np.testing.assert_allclose(ctx.run({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-5)
    ctx.set_input_shape("x", (5, 6))
    assert ctx.tensor_shape("y") == (5, 3)
    with pytest.raises(kiln.InvalidArgumentError, match="outside profile"):
        ctx.run({"x": np.zeros((9, 6), np.float32)})


def test_explicit_profiles(mlp, rng):
    model, reference = mlp
    p = kiln.OptimizationProfile({"x": ((1, 6), (2, 6), (4, 6))})
    p.set_shape("x", min=(1, 6), opt=(2, 6), max=(16, 6))
    config = kiln.BuilderConfig(profiles=[p], opt_level=1)
    assert config.opt_level == 1 and len(config.profiles) == 1
    engine = kiln.Builder().build(model, config)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    np.testing.assert_allclose(engine.run(x)["y"], reference(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(kiln.InvalidArgumentError, match="either profiles or shapes"):
        kiln.build(model, config, shapes={"x": (1, 6)})


def test_builder_config_options():
    c = kiln.BuilderConfig(fp16=True, threads=2, shapes="x:1x6,y:2x3", timing_cache="", opt_level=0)
    assert c.fp16 and not c.bf16 and c.threads == 2 and c.opt_level == 0
    assert c.shapes == {"x": (1, 6), "y": (2, 3)}
    c.int8 = True
    c.max_shapes = {"x": [8, 6]}
    assert c.int8 and c.max_shapes == {"x": (8, 6)}
    assert "fp16=True" in repr(c)
    with pytest.raises(TypeError, match="unknown build option 'fp61'"):
        kiln.BuilderConfig(fp61=True)
    with pytest.raises(kiln.InvalidArgumentError, match="unknown device 'tpu'"):
        kiln.BuilderConfig(device="tpu")
    with pytest.raises(kiln.InvalidArgumentError, match="optimization level 3"):
        kiln.BuilderConfig(opt_level=3)
    with pytest.raises(kiln.InvalidArgumentError, match="expected a bool"):
        kiln.BuilderConfig(fp16="yes")


def test_save_load_serialize_pickle(mlp_engine, tmp_path, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = mlp_engine.run({"x": x})["y"]
    path = tmp_path / "mlp.kiln"
    mlp_engine.save(path)
    for e in (kiln.load(path), kiln.Engine.load(str(path)), kiln.Engine.deserialize(mlp_engine.serialize()),
              pickle.loads(pickle.dumps(mlp_engine))):
        assert [d.name for d in e.inputs] == ["x"]
        np.testing.assert_array_equal(e.create_execution_context().run({"x": x})["y"], want)
    assert path.read_bytes() == mlp_engine.serialize()


def test_multiple_inputs_and_outputs(rng):
    engine = kiln.build(two_input_model())
    a = rng.standard_normal((2, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4)).astype(np.float32)
    k = np.array([3, -1, 7], dtype=np.int64)
    out = engine.create_execution_context().run({"a": a, "b": b, "k": k})
    assert list(out) == ["sum", "idx"]
    np.testing.assert_array_equal(out["sum"], a + b)
    assert out["idx"].dtype == np.int64
    np.testing.assert_array_equal(out["idx"], k * 2)
    # Lists and scalars are converted in the engine's dtype.
    out = engine.run({"a": a.tolist(), "b": b, "k": [1, 2, 3]})
    np.testing.assert_allclose(out["sum"], a + b)
    np.testing.assert_array_equal(out["idx"], [2, 4, 6])


def test_inputs_not_copied_outputs_independent(mlp_engine, rng):
    ctx = mlp_engine.create_execution_context()
    x1 = rng.standard_normal((4, 6)).astype(np.float32)
    x2 = rng.standard_normal((4, 6)).astype(np.float32)
    y1 = ctx.run({"x": x1})["y"]
    keep = y1.copy()
    y2 = ctx.run({"x": x2})["y"]
    np.testing.assert_array_equal(y1, keep)  # the first result is not overwritten by the second run
    assert not np.array_equal(y1, y2)
    y1[:] = 0  # outputs are writable arrays the caller owns
    # Non-contiguous and Fortran-ordered inputs are accepted (copied once).
    xt = np.asfortranarray(x1)
    np.testing.assert_array_equal(ctx.run({"x": xt})["y"], keep)
    big = np.zeros((8, 12), np.float32)
    big[::2, ::2] = x1
    np.testing.assert_array_equal(ctx.run({"x": big[::2, ::2]})["y"], keep)


def test_sample_cnn(cnn_engine, rng):
    image = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    probs = cnn_engine.run({"image": image})["probs"]
    assert probs.shape == (2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    report = kiln.compare(SAMPLE_CNN, cnn_engine, {"image": image})
    np.testing.assert_allclose(probs, report.output("probs").reference, rtol=1e-4, atol=1e-6)


def test_gil_released_while_running(rng):
    model, _ = mlp_model(features=256, hidden=512)
    engine = kiln.build(model, shapes={"x": (64, 256)})
    x = rng.standard_normal((64, 256)).astype(np.float32)
    ctx = engine.create_execution_context()
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        start = len(ticks)
        stats = engine.bench({"x": x}, warmup_ms=0, duration_s=0.3)
        during = len(ticks) - start
    finally:
        stop.set()
        t.join()
    assert stats["iterations"] >= 10
    assert during > 20  # the Python thread kept running while kiln benchmarked
    assert np.isfinite(ctx.run({"x": x})["y"]).all()


def test_contexts_in_threads(mlp, rng):
    model, reference = mlp
    engine = kiln.build(model, min_shapes={"x": (1, 6)}, max_shapes={"x": (8, 6)})
    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        ctx = engine.create_execution_context()
        try:
            for _ in range(20):
                x = r.standard_normal((int(r.integers(1, 9)), 6)).astype(np.float32)
                np.testing.assert_allclose(ctx.run({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-5)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_progress_and_logger(mlp):
    stages = []
    messages = []
    engine = kiln.Builder(logger=lambda sev, msg: messages.append((sev, msg))).build(
        mlp[0], progress=lambda stage, f: stages.append((stage, f)))
    assert stages[0] == ("import", 0.0) and stages[-1] == ("done", 1.0)
    assert [f for _, f in stages] == sorted(f for _, f in stages)
    assert engine.inputs[0].shape == (1, 6)  # a dynamic dim with no shape given becomes 1


def test_progress_exception_propagates(mlp):
    def boom(stage, fraction):
        if stage == "tactics":
            raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        kiln.build(mlp[0], progress=boom)


def test_ctrl_c_cancels_build(mlp):
    import os
    import signal

    stages = []

    def interrupt(stage, fraction):
        stages.append(stage)
        if stage == "optimize":
            os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C
            time.sleep(0.3)  # the main thread notices while the build is still going

    with pytest.raises(KeyboardInterrupt):
        kiln.build(mlp[0], progress=interrupt)
    assert "done" not in stages  # it stopped at the next stage, not at the end
