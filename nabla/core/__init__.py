"""Core (layer 0): dtypes, devices, config, transform state, pytrees and the IR; runs nothing."""
