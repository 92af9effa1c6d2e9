"""kiln.compare() and kiln.bench(): the same reports as `kiln compare` / `kiln bench --json`."""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import kiln
from conftest import REPO, SAMPLE_CNN, mlp_model


def cli_path():
    path = os.environ.get("KILN_CLI")
    if not path:
        for build in ("build", "build-py"):
            candidate = os.path.join(REPO, build, "kiln")
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                path = candidate
                break
    return path if path and os.path.isfile(path) else None


def test_compare_in_memory_build():
    report = kiln.compare(SAMPLE_CNN, shapes={"image": (3, 3, 32, 32)}, seed=5)
    assert report.passed and bool(report) and report.engine_built
    assert report.random_inputs == ["image"] and report.inputs["image"].shape == (3, 3, 32, 32)
    out = report.output("probs")
    assert out.compared and out.passed and out.elements == 30 and out.out_of_tolerance == 0
    assert out.reference.shape == out.engine.shape == (3, 10)
    assert 0 <= out.max_abs_err < 1e-4 and out.cosine > 0.9999 and out.rel_l2_err < 1e-4
    assert out.top_k_rows == 3 and out.top1_agreement == 3 and out.top5_agreement == 3
    np.testing.assert_allclose(out.engine, out.reference, rtol=1e-3, atol=1e-4)
    text = str(report)
    assert text.startswith("Tolerance: |engine - reference| <= 0.0001 + 0.001 * |reference|\n")
    assert "Output probs float32[3,10]: PASS" in text and text.endswith("Result: PASS\n")


def test_compare_given_engine_and_inputs(cnn_engine, tmp_path, rng):
    image = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    report = kiln.compare(SAMPLE_CNN, cnn_engine, {"image": image}, layerwise=True)
    assert report.passed and not report.engine_built and report.random_inputs == []
    np.testing.assert_array_equal(report.inputs["image"], image)
    assert report.layers and all(layer.passed for layer in report.layers)
    assert report.first_divergence is None and "Layerwise:" in report.text
    path = tmp_path / "cnn.kiln"
    cnn_engine.save(path)
    from_file = kiln.compare(SAMPLE_CNN, str(path), {"image": image})
    assert from_file.text == kiln.compare(SAMPLE_CNN, cnn_engine, {"image": image}).text


def test_compare_detects_a_wrong_engine(rng):
    model_a, _ = mlp_model(seed=1)
    model_b, _ = mlp_model(seed=2)  # same interface, other weights
    engine_b = kiln.build(model_b, shapes={"x": (4, 6)})
    report = kiln.compare(model_a, engine_b, shapes={"x": (4, 6)}, layerwise=True)
    assert not report.passed and not bool(report)
    out = report.output("y")
    assert not out.passed and out.out_of_tolerance > 0 and out.max_abs_err > 1e-3
    assert out.worst_index is not None and len(out.worst_index) == 2
    assert math.isclose(abs(out.worst_engine - out.worst_reference), out.max_abs_err, rel_tol=0.5) or \
        abs(out.worst_engine - out.worst_reference) > 1e-4
    assert "FAIL (" in report.text and report.text.endswith("Result: FAIL\n")
    assert report.first_divergence is not None and not report.first_divergence.passed


def test_compare_same_report_as_cli(tmp_path):
    cli = cli_path()
    if not cli:
        pytest.skip("the kiln CLI is not built (set KILN_CLI)")
    # One engine file for both, built for one thread: the same tactics and the same
    # summation order, so the numbers agree to the last digit.
    engine_path = tmp_path / "cnn.kiln"
    kiln.build(SAMPLE_CNN, shapes={"image": (2, 3, 32, 32)}, threads=1).save(engine_path)
    proc = subprocess.run([cli, "compare", SAMPLE_CNN, "--engine", str(engine_path), "--seed", "7", "--layerwise"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cli_report = proc.stdout[proc.stdout.index("Tolerance:"):]
    report = kiln.compare(SAMPLE_CNN, str(engine_path), seed=7, layerwise=True)
    assert report.text == cli_report


def test_bench_engine(cnn_engine):
    stats = cnn_engine.bench(iterations=5, duration_s=0, warmup_ms=0, profile=True)
    assert stats["device"] == "cpu" and stats["iterations"] == 5 and stats["warmup_iterations"] >= 1
    lat = stats["latency_ms"]
    assert set(lat) == {"min", "mean", "median", "p90", "p95", "p99", "max"}
    assert 0 < lat["min"] <= lat["median"] <= lat["max"] and lat["min"] <= lat["mean"] <= lat["max"]
    assert stats["throughput_qps"] > 0 and stats["shapes"] == {"image": [2, 3, 32, 32]}
    assert stats["model"] is None and stats["engine"] is None and "build_s" not in stats
    assert stats["layers"] and abs(sum(layer["percent"] for layer in stats["layers"]) - 100) < 1e-6
    assert all(set(layer) == {"name", "op", "tactic", "ms", "percent"} for layer in stats["layers"])


def test_bench_model_matches_cli_json_keys(tmp_path):
    stats = kiln.bench(SAMPLE_CNN, iterations=3, duration_s=0, warmup_ms=0, shapes={"image": (1, 3, 32, 32)})
    assert stats["model"] == SAMPLE_CNN and stats["engine"] is None and stats["build_s"] > 0
    assert stats["shapes"] == {"image": [1, 3, 32, 32]}
    cli = cli_path()
    if not cli:
        pytest.skip("the kiln CLI is not built (set KILN_CLI)")
    out = tmp_path / "bench.json"
    proc = subprocess.run([cli, "bench", SAMPLE_CNN, "--iterations", "3", "--warmup-ms", "0", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(out.read_text())) == set(stats)
