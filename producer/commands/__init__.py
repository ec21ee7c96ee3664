"""The `prism` commands, one module per subject; producer/cli.py puts them together."""
