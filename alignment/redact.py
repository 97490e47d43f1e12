"""Credentials never leave the process in text it writes: errors a library built, model cards."""

from __future__ import annotations

import os
import re

# Environment variables that hold credentials (config fields that may hold one are marked secret=True)
SECRET_ENV = ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def scrub(text: str) -> str:
    """`text` with the credentials this process holds masked: SECRET_ENV's values and the
    user:password@ of URLs (endpoint URLs)."""
    for var in SECRET_ENV:
        if os.environ.get(var):
            text = text.replace(os.environ[var], "***")
    return re.sub(r"//[^/@\s]+@", "//***@", text)
