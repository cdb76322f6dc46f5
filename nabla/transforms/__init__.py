"""Function transforms (layer 4): vmap, autodiff, custom rules, compile, trace."""
