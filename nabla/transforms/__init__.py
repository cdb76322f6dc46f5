"""Function transforms: vmap, autodiff (vjp/grad/jvp/jacobians), compile, control flow."""
