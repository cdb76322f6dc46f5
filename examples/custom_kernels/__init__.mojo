# A Mojo kernel package: this file makes the directory a package; the kernels are in the
# other files of the directory. nabla precompiles the package once into its cache.
