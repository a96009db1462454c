"""The Lambda handler's import stays lean: no boto3 client, numpy, PIL or onnxruntime at cold start
(they load on the first request that needs them)."""

import subprocess
import sys


def test_front_handler_import_does_not_load_heavy_modules():
    code = (
        "import sys, functions.front; "
        "print(sorted(m for m in ('boto3', 'numpy', 'PIL', 'onnxruntime', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
