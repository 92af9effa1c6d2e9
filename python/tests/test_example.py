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
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))


def run_example(python, *args, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([python, EXAMPLE, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_example_with_onnx_model():
    proc = run_example(sys.executable, "--model", SAMPLE_CNN, "--runs", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "output probs: float32[1, 10]" in out
    assert "check vs reference backend: probs" in out and "-> PASS" in out
    assert "speedup" in out


def torch_python():
    """An interpreter with torch and torchvision that can import this kiln build."""
    candidates = [sys.executable, os.environ.get("KILN_TORCH_PYTHON"), shutil.which("python3"), "/usr/bin/python3"]
    probe = "import torch, torchvision, kiln; print(kiln.__file__)"
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_PARENT
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return python
    return None


def test_example_with_pytorch():
    python = torch_python()
    if not python:
        pytest.skip("no interpreter with torch + torchvision that can import this kiln build")
    proc = run_example(python, "--runs", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "exported resnet18" in out and "check vs PyTorch" in out and "-> PASS" in out
    assert "speedup" in out
