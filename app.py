#!/usr/bin/env python3
"""CDK entry point: ``python app.py`` (or ``cdk synth``) synthesizes every Skinflint stack offline.
See docs/deploy.md."""

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from cdk.app import main  # noqa: E402 - the environment above must be set before jsii starts

if __name__ == "__main__":
    sys.exit(main())
