"""planner/ is pure: importing it must not pull in AWS SDKs or heavy runtimes."""

import subprocess
import sys


def test_import_planner_does_not_load_boto3_or_torch():
    code = "import sys, planner; print(sorted(m for m in ('boto3', 'botocore', 'torch', 'onnxruntime') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
