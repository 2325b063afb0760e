/* sts_coll_peers.h - how many datatypes MPI_Alltoallw or a neighbourhood
 * collective on a communicator takes, asked of the MPI's own answers: one
 * per member of the group or, on an intercommunicator, of the remote group;
 * for a neighbourhood collective, one per out-neighbour (out) or
 * in-neighbour (MPI-3.1 7.6: a Cartesian topology has 2 * ndims of each).
 *
 * Both halves count, each translating its side of the array: the upper
 * half includes this with STS_PEERS_CALL(f) as PMPI_##f (uh_conv.c), the
 * lower half with MPI_##f (lh_state.c). */
#ifndef STS_PEERS_CALL
#error define STS_PEERS_CALL(f) first
#endif

static int coll_peers(MPI_Comm c, int neighbor, int out)
{
	int n = 0, inter = 0, topo = MPI_UNDEFINED, in, o, w, rank;

	if (!neighbor) {
		STS_PEERS_CALL(Comm_test_inter)(c, &inter);
		if (inter)
			STS_PEERS_CALL(Comm_remote_size)(c, &n);
		else
			STS_PEERS_CALL(Comm_size)(c, &n);
		return n;
	}
	STS_PEERS_CALL(Topo_test)(c, &topo);
	if (topo == MPI_CART) {
		STS_PEERS_CALL(Cartdim_get)(c, &n);
		return 2 * n;
	}
	if (topo == MPI_GRAPH) {
		STS_PEERS_CALL(Comm_rank)(c, &rank);
		STS_PEERS_CALL(Graph_neighbors_count)(c, rank, &n);
		return n;
	}
	if (topo == MPI_DIST_GRAPH &&
	    STS_PEERS_CALL(Dist_graph_neighbors_count)(c, &in, &o, &w) == MPI_SUCCESS)
		return out ? o : in;
	return 0;
}
