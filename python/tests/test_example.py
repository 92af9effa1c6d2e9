"""examples/python_quickstart.py end to end on the CPU: with an ONNX model (no torch:
this runs in CI), and exporting from PyTorch where an interpreter with torch and
torchvision can import this kiln build (skipped otherwise)."""
import os
import shutil
import subprocess
import sys

import pytest

import kiln
from conftest import REPO, SAMPLE_CNN

EXAMPLE = os.path.join(REPO, "examples", "python_quickstart.py")
PACKAGE = os.path.dirname(os.path.abspath(kiln.__file__))


@pytest.fixture(scope="module")
def kiln_path(tmp_path_factory):
    """A folder holding only this kiln package (a link), for PYTHONPATH: where kiln is
    pip-installed, its site-packages would also bring its numpy to other interpreters."""
    folder = tmp_path_factory.mktemp("kiln_path")
    os.symlink(PACKAGE, folder / "kiln")
    return str(folder)


def example_env(kiln_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = kiln_path
    return env


def run_example(python, kiln_path, *args, timeout=600):
    return subprocess.run([python, EXAMPLE, *args], capture_output=True, text=True, timeout=timeout,
                          env=example_env(kiln_path))


def test_example_with_onnx_model(kiln_path):
    proc = run_example(sys.executable, kiln_path, "--model", SAMPLE_CNN, "--runs", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "output probs: float32[1, 10]" in out
    assert "check vs reference backend: probs" in out and "-> PASS" in out
    assert "speedup" in out


def torch_python(kiln_path):
    """An interpreter with torch and torchvision that can import this kiln build."""
    candidates = [sys.executable, os.environ.get("KILN_TORCH_PYTHON"), shutil.which("python3"), "/usr/bin/python3"]
    probe = "import torch, torchvision, kiln; torch.zeros(2).numpy(); print(kiln.__file__)"
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120,
                               env=example_env(kiln_path))
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return python
    return None


def test_example_with_pytorch(kiln_path):
    python = torch_python(kiln_path)
    if not python:
        pytest.skip("no interpreter with torch + torchvision that can import this kiln build")
    proc = run_example(python, kiln_path, "--runs", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "exported resnet18" in out and "check vs PyTorch" in out and "-> PASS" in out
    assert "speedup" in out
