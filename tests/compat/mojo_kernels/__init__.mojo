# A kernel package for the original Nabla's tutorial 12, in the Mojo dialect of MAX 26.7.
