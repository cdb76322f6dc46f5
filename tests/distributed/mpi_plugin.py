"""A pytest plugin (``-p mpi_plugin``) that joins the MPI world before the tests are
collected, so a sharded suite runs with its meshes spanning the processes."""

import nabla as nb

nb.distributed.initialize()
