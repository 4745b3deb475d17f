"""The version of p2pem, in a leaf module so that any room may record it (saved models, outputs)."""

__version__ = "0.1.0"
