"""Graph and distributed graph topologies, the neighbourhood collectives and
MPI_Alltoallw across restarts (docs/split.md, "Objects across a restart"):
topo.c makes a weighted MPI_Dist_graph_create_adjacent communicator, an
MPI_Dist_graph_create one (reorder allowed), an MPI_Graph_create ring, a
Cartesian line and a vector type before its loop; every iteration checks
each topology's queries and runs every neighbourhood collective, blocking
and not, v and w, and MPI_Alltoallw/MPI_Ialltoallw, checking every element.
A restart builds each topology again from what was recorded (the members as
world ranks; the graph's index and edges; this rank's neighbours and
weights in MPI_Dist_graph_neighbors' order), so the collectives after it
find the same neighbours in the same order, above either MPI.

Environment: STASIS_BIN, STASIS_BUILD."""

from program_tests import program_tests

# topo.c's checks per rank (n) and iterations (i)
prog, test_runs, test_three_cycles = program_tests(
    "topo", lambda n, i: n * i * 18, ranks=3)
