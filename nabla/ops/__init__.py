"""Ops: the ``Operation`` pipeline (``base``) and one module per op family."""
