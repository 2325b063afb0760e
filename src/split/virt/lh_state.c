/* lh_state.c - the objects the program created, recorded in the ledger
 * when they are made and built again on a fresh MPI at restart
 * (lh_ledger.h; docs/split.md, "Objects across a restart").
 *
 * What is recorded is what the real MPI says about the new object, in
 * neutral terms, so that either MPI can build it again:
 *   communicator  its members as world ranks (MPI_Group_translate_ranks),
 *                 and its topology: a Cartesian one's dims and periods, a
 *                 graph's index and edges, a distributed graph's
 *                 neighbours of this rank with their weights, in
 *                 MPI_Dist_graph_neighbors' order (the order of the
 *                 neighbourhood collectives); rebuilt with
 *                 MPI_Comm_create_group over MPI_COMM_WORLD (collective over
 *                 the members only) then MPI_Cart_create, MPI_Graph_create
 *                 or MPI_Dist_graph_create_adjacent without reordering
 *                 (an intercommunicator: both groups' members; rebuilt
 *                 with MPI_Intercomm_create between the groups' first
 *                 members)
 *   group         its members as world ranks; MPI_Group_incl
 *   datatype      its construction, decoded with MPI_Type_get_envelope and
 *                 MPI_Type_get_contents down to predefined types (a tree:
 *                 types the program freed since stay inside the ones built
 *                 from them), the values of a subarray's or darray's that
 *                 differ between the ABIs made neutral; rebuilt bottom up
 *                 and committed (MPI_Type_create_f90_*'s, predefined, made
 *                 again only)
 *   operation     its trampoline slot and commutativity; MPI_Op_create
 *   file          path, mode, members, view (lh_io.c); opened again
 *   request       its record (lh_p2p.c): pending receives are posted again
 * Objects are rebuilt in the order they were created, so collective
 * creations happen in the same order on every member.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "lh.h"
#include "lh_ledger.h"
#include "lh_spare.h"

enum { TOPO_NONE, TOPO_CART, TOPO_GRAPH, TOPO_DIST, TOPO_INTER };

struct rec_comm {
	int n;                  /* members (of the local group) */
	int topo;               /* TOPO_*; TOPO_INTER: an intercommunicator */
	int ndims;              /* Cartesian: dimensions; graph: nodes; distributed
				 * graph, intercommunicator: ints after the world ranks */
	int v[];                /* world ranks [n], then
				 * Cartesian: dims [ndims], periods [ndims], coords [ndims]
				 * graph: index [ndims], edges [index[ndims - 1]]
				 * distributed graph: indegree, outdegree, weighted,
				 * sources, their weights, destinations, theirs
				 * intercommunicator: the remote group's size, its
				 * members as world ranks */
};

struct rec_group {
	int n;                  /* -1: a member outside MPI_COMM_WORLD */
	int v[];
};

/* (new ones at the end: a ledger saved before them keeps its meaning) */
enum comb { C_BAD, C_DUP, C_CONTIGUOUS, C_VECTOR, C_HVECTOR, C_INDEXED, C_HINDEXED,
	    C_INDEXED_BLOCK, C_HINDEXED_BLOCK, C_STRUCT, C_RESIZED, C_SUBARRAY, C_DARRAY,
	    C_F90_REAL, C_F90_COMPLEX, C_F90_INTEGER };

struct rec_type {
	int comb;               /* enum comb; C_BAD: cannot be rebuilt */
	int real_comb;          /* the MPI's combiner, for the error */
	int ni, na, nd;
	int *ints;              /* as MPI_Type_get_contents gives them, but the
				 * values that differ between the ABIs (subarray's
				 * and darray's order, darray's distributions and
				 * default argument): neutral (sts_mpi.h) */
	MPI_Aint *aints;
	struct rec_type **kids; /* NULL entry: predefined, neutral number in kid_pre */
	uint32_t *kid_pre;
};

struct rec_op {
	int slot, commute;
};

static MPI_Group world_g = MPI_GROUP_NULL;   /* lh_world's group */

static MPI_Group world_group(void)
{
	if (world_g == MPI_GROUP_NULL)
		MPI_Comm_group(lh_world, &world_g);
	return world_g;
}

/* ---- communicators and groups ---- */

static int *world_ranks(MPI_Group g, int *n)
{
	int *in, *out;

	MPI_Group_size(g, n);
	in = malloc((size_t)(*n + 1) * sizeof(int));
	out = malloc((size_t)(*n + 1) * sizeof(int));
	if (!in || !out) {
		free(in);
		free(out);
		return NULL;
	}
	for (int i = 0; i < *n; i++)
		in[i] = i;
	MPI_Group_translate_ranks(g, *n, in, world_group(), out);
	free(in);
	return out;
}

/* a topology's ints after the world ranks (struct rec_comm) */
static int topo_ints(MPI_Comm c, int topo, int *nd)
{
	int nedges = 0, in = 0, out = 0, weighted = 0;

	*nd = 0;
	if (topo == MPI_CART) {
		MPI_Cartdim_get(c, nd);
		return 3 * *nd;
	}
	if (topo == MPI_GRAPH) {
		MPI_Graphdims_get(c, nd, &nedges);
		return *nd + nedges;
	}
	if (topo == MPI_DIST_GRAPH) {
		MPI_Dist_graph_neighbors_count(c, &in, &out, &weighted);
		*nd = 3 + 2 * (in + out);
		return *nd;
	}
	return 0;
}

static void topo_record(MPI_Comm c, int topo, struct rec_comm *r)
{
	int *t = r->v + r->n, nd = r->ndims;

	if (topo == MPI_CART) {
		r->topo = TOPO_CART;
		MPI_Cart_get(c, nd, t, t + nd, t + 2 * nd);
	} else if (topo == MPI_GRAPH) {
		int nnodes, nedges;

		r->topo = TOPO_GRAPH;
		MPI_Graphdims_get(c, &nnodes, &nedges);
		MPI_Graph_get(c, nnodes, nedges, t, t + nnodes);
	} else if (topo == MPI_DIST_GRAPH) {
		int in, out, w;

		r->topo = TOPO_DIST;
		MPI_Dist_graph_neighbors_count(c, &in, &out, &w);
		t[0] = in;
		t[1] = out;
		t[2] = w;
		MPI_Dist_graph_neighbors(c, in, t + 3, w ? t + 3 + in : MPI_UNWEIGHTED, out,
					 t + 3 + 2 * in, w ? t + 3 + 2 * in + out : MPI_UNWEIGHTED);
	}
}

/* an intercommunicator: both groups' members as world ranks */
static void *record_inter(MPI_Comm c)
{
	struct rec_comm *r = NULL;
	MPI_Group g;
	int n = 0, rn = 0, *w, *rw;

	MPI_Comm_group(c, &g);
	w = world_ranks(g, &n);
	MPI_Group_free(&g);
	MPI_Comm_remote_group(c, &g);
	rw = world_ranks(g, &rn);
	MPI_Group_free(&g);
	if (w && rw)
		r = lg_calloc(sizeof(*r) + (size_t)(n + 1 + rn) * sizeof(int));
	if (r) {
		r->n = n;
		r->topo = TOPO_INTER;
		r->ndims = 1 + rn;
		memcpy(r->v, w, (size_t)n * sizeof(int));
		r->v[n] = rn;
		memcpy(r->v + n + 1, rw, (size_t)rn * sizeof(int));
	}
	free(w);
	free(rw);
	return r;
}

static void *record_comm(MPI_Comm c)
{
	struct rec_comm *r;
	MPI_Group g;
	int inter = 0, n = 0, topo = MPI_UNDEFINED, nd = 0, nt, *w;

	MPI_Comm_test_inter(c, &inter);
	if (inter)
		return record_inter(c);
	MPI_Comm_group(c, &g);
	w = world_ranks(g, &n);
	MPI_Group_free(&g);
	if (!w)
		return NULL;
	MPI_Topo_test(c, &topo);
	nt = topo_ints(c, topo, &nd);
	r = lg_calloc(sizeof(*r) + (size_t)(n + nt) * sizeof(int));
	if (r) {
		r->n = n;
		r->ndims = nd;
		memcpy(r->v, w, (size_t)n * sizeof(int));
		topo_record(c, topo, r);
	}
	free(w);
	return r;
}

/* some member of r (of either group of an intercommunicator) is outside
 * MPI_COMM_WORLD: a process of the job that spawned this one
 * (MPI_Comm_get_parent), which no checkpoint of this job holds */
static int outside(const struct rec_comm *r)
{
	int n = r->n + (r->topo == TOPO_INTER ? 1 + r->v[r->n] : 0);

	for (int i = 0; i < n; i++)
		if (r->v[i] == MPI_UNDEFINED)
			return 1;
	return 0;
}

static void *record_group(MPI_Group g)
{
	struct rec_group *r;
	int n = 0, *w = world_ranks(g, &n);

	if (!w)
		return NULL;
	r = lg_calloc(sizeof(*r) + (size_t)n * sizeof(int));
	if (r) {
		r->n = n;
		memcpy(r->v, w, (size_t)n * sizeof(int));
		for (int i = 0; i < n; i++)
			if (w[i] == MPI_UNDEFINED)
				r->n = -1;
	}
	free(w);
	return r;
}

int lh_world_of(uint32_t comm, int rank)
{
	const struct lh_slot *s;
	const struct rec_comm *r;

	if (rank < 0)
		return -1;
	if (comm == 1)
		return rank < lh_lg->world_size ? rank : -1;
	if (comm == 2)
		return rank == 0 ? lh_lg->world_rank : -1;
	s = lh_slot_of(STS_COMM, comm);
	r = s ? s->rec : NULL;
	if (r && r->topo == TOPO_INTER)   /* a peer is in the remote group */
		return rank < r->v[r->n] ? r->v[r->n + 1 + rank] : -1;
	return r && rank < r->n ? r->v[rank] : -1;
}

/* ---- datatypes ---- */

static int comb_of(int c)
{
	return c == MPI_COMBINER_DUP ? C_DUP : c == MPI_COMBINER_CONTIGUOUS ? C_CONTIGUOUS :
	       c == MPI_COMBINER_VECTOR ? C_VECTOR : c == MPI_COMBINER_HVECTOR ? C_HVECTOR :
	       c == MPI_COMBINER_INDEXED ? C_INDEXED : c == MPI_COMBINER_HINDEXED ? C_HINDEXED :
	       c == MPI_COMBINER_INDEXED_BLOCK ? C_INDEXED_BLOCK :
	       c == MPI_COMBINER_HINDEXED_BLOCK ? C_HINDEXED_BLOCK :
	       c == MPI_COMBINER_STRUCT ? C_STRUCT : c == MPI_COMBINER_RESIZED ? C_RESIZED :
	       c == MPI_COMBINER_SUBARRAY ? C_SUBARRAY : c == MPI_COMBINER_DARRAY ? C_DARRAY :
	       c == MPI_COMBINER_F90_REAL ? C_F90_REAL : c == MPI_COMBINER_F90_COMPLEX ? C_F90_COMPLEX :
	       c == MPI_COMBINER_F90_INTEGER ? C_F90_INTEGER : C_BAD;
}

/* MPI_Type_create_f90_*'s types are predefined ones (MPI-3.1 17.1.9): never
 * freed, and what MPI_Type_get_contents gives of them neither */
static int f90(int comb)
{
	return comb == C_F90_REAL || comb == C_F90_COMPLEX || comb == C_F90_INTEGER;
}

int *lh_ints_in(const int *v, int n, int (*tr)(int))
{
	int *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));

	if (out)
		for (int i = 0; i < n; i++)
			out[i] = tr(v[i]);
	return out;
}

/* The values of a subarray's or darray's contents that differ between the
 * ABIs, through tr_order, tr_distrib and tr_darg (to neutral ones when
 * recorded, back to this MPI's when built): 0, or -1 when the counts are
 * not those of the constructor. */
static int translate_ints(int comb, int *I, int ni, int (*tr_order)(int),
			  int (*tr_distrib)(int), int (*tr_darg)(int))
{
	if (comb == C_SUBARRAY) {
		int n = ni > 0 ? I[0] : -1;   /* ndims, sizes, subsizes, starts, order */

		if (n < 0 || ni != 3 * n + 2)
			return -1;
		I[3 * n + 1] = tr_order(I[3 * n + 1]);
	} else if (comb == C_DARRAY) {
		/* size, rank, ndims, gsizes, distribs, dargs, psizes, order */
		int n = ni > 2 ? I[2] : -1;

		if (n < 0 || ni != 4 * n + 4)
			return -1;
		for (int i = 0; i < n; i++) {
			I[3 + n + i] = tr_distrib(I[3 + n + i]);
			I[3 + 2 * n + i] = tr_darg(I[3 + 2 * n + i]);
		}
		I[3 + 4 * n] = tr_order(I[3 + 4 * n]);
	}
	return 0;
}

static void type_free_rec(struct rec_type *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->nd; i++)
		type_free_rec(r->kids[i]);
	lg_free(r);
}

static uint32_t predefined_type(MPI_Datatype t)
{
	uint32_t n = lh_find(STS_DATATYPE, LH_HVAL(t));

	return n < STS_FIRST_USER ? n : UINT32_MAX;
}

/* The construction of t, down to predefined types; NULL: out of memory. */
static struct rec_type *record_type(MPI_Datatype t)
{
	int ni = 0, na = 0, nd = 0, c = 0;
	struct rec_type *r;
	MPI_Datatype *types;
	size_t size;

	MPI_Type_get_envelope(t, &ni, &na, &nd, &c);
	size = sizeof(*r) + (size_t)na * sizeof(MPI_Aint) + (size_t)nd * (sizeof(void *) + 4) +
	       (size_t)ni * sizeof(int);
	r = lg_calloc(size);
	if (!r)
		return NULL;
	r->real_comb = c;
	r->comb = comb_of(c);
	r->ni = ni;
	r->na = na;
	r->nd = nd;
	r->aints = (MPI_Aint *)(r + 1);
	r->kids = (struct rec_type **)(r->aints + na);
	r->kid_pre = (uint32_t *)(r->kids + nd);
	r->ints = (int *)(r->kid_pre + nd);
	if (c == MPI_COMBINER_NAMED || r->comb == C_BAD) {
		r->nd = 0;
		r->comb = C_BAD;
		return r;
	}
	types = malloc((size_t)(nd + 1) * sizeof(*types));
	if (!types) {
		lg_free(r);
		return NULL;
	}
	MPI_Type_get_contents(t, ni, na, nd, r->ints, r->aints, types);
	if (translate_ints(r->comb, r->ints, ni, lh_order_out, lh_distrib_out, lh_darg_out) != 0)
		r->comb = C_BAD;
	for (int i = 0; i < nd; i++) {
		int ki, ka, kd, kc;

		MPI_Type_get_envelope(types[i], &ki, &ka, &kd, &kc);
		if (kc == MPI_COMBINER_NAMED) {
			r->kid_pre[i] = predefined_type(types[i]);
			if (r->kid_pre[i] == UINT32_MAX)
				r->comb = C_BAD;   /* a predefined type Stasis does not name */
			continue;
		}
		r->kids[i] = record_type(types[i]);
		if (!f90(comb_of(kc)))
			MPI_Type_free(&types[i]);
		if (!r->kids[i] || r->kids[i]->comb == C_BAD)
			r->comb = C_BAD;
	}
	free(types);
	return r;
}

static int build_type(const struct rec_type *r, MPI_Datatype *out);

static int kid(const struct rec_type *r, int i, MPI_Datatype *t)
{
	if (!r->kids[i]) {
		*t = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, r->kid_pre[i]);
		return MPI_SUCCESS;
	}
	return build_type(r->kids[i], t);
}

static void kid_done(const struct rec_type *r, int i, MPI_Datatype *t)
{
	if (r->kids[i] && !f90(r->kids[i]->comb))
		MPI_Type_free(t);
}

/* a subarray or darray, its contents back in this MPI's values */
static int build_array(const struct rec_type *r, MPI_Datatype k, MPI_Datatype *out)
{
	int *I = malloc((size_t)(r->ni + 1) * sizeof(int)), n, ret;

	if (!I)
		return MPI_ERR_NO_MEM;
	memcpy(I, r->ints, (size_t)r->ni * sizeof(int));
	if (translate_ints(r->comb, I, r->ni, lh_order_in, lh_distrib_in, lh_darg_in) != 0) {
		free(I);
		return MPI_ERR_TYPE;
	}
	if (r->comb == C_SUBARRAY) {
		n = I[0];
		ret = MPI_Type_create_subarray(n, I + 1, I + 1 + n, I + 1 + 2 * n, I[1 + 3 * n], k, out);
	} else {
		n = I[2];
		ret = MPI_Type_create_darray(I[0], I[1], n, I + 3, I + 3 + n, I + 3 + 2 * n,
					     I + 3 + 3 * n, I[3 + 4 * n], k, out);
	}
	free(I);
	return ret;
}

static int build_type(const struct rec_type *r, MPI_Datatype *out)
{
	const int *I = r->ints;
	const MPI_Aint *A = r->aints;
	MPI_Datatype k = MPI_DATATYPE_NULL, *ks = NULL;
	int ret;

	if (r->comb == C_STRUCT) {
		ks = malloc((size_t)(r->nd + 1) * sizeof(*ks));
		if (!ks)
			return MPI_ERR_NO_MEM;
		for (int i = 0; i < r->nd; i++)
			if ((ret = kid(r, i, &ks[i])) != MPI_SUCCESS) {
				while (i--)
					kid_done(r, i, &ks[i]);
				free(ks);
				return ret;
			}
		ret = MPI_Type_create_struct(I[0], I + 1, A, ks, out);
		for (int i = 0; i < r->nd; i++)
			kid_done(r, i, &ks[i]);
		free(ks);
		return ret;
	}
	switch (r->comb) {   /* no datatype inside */
	case C_F90_REAL: return r->ni == 2 ? MPI_Type_create_f90_real(I[0], I[1], out) : MPI_ERR_TYPE;
	case C_F90_COMPLEX:
		return r->ni == 2 ? MPI_Type_create_f90_complex(I[0], I[1], out) : MPI_ERR_TYPE;
	case C_F90_INTEGER: return r->ni == 1 ? MPI_Type_create_f90_integer(I[0], out) : MPI_ERR_TYPE;
	default: break;
	}
	if (r->nd != 1 || (ret = kid(r, 0, &k)) != MPI_SUCCESS)
		return r->nd != 1 ? MPI_ERR_TYPE : ret;
	switch (r->comb) {
	case C_DUP: ret = MPI_Type_dup(k, out); break;
	case C_CONTIGUOUS: ret = MPI_Type_contiguous(I[0], k, out); break;
	case C_VECTOR: ret = MPI_Type_vector(I[0], I[1], I[2], k, out); break;
	case C_HVECTOR: ret = MPI_Type_create_hvector(I[0], I[1], A[0], k, out); break;
	case C_INDEXED: ret = MPI_Type_indexed(I[0], I + 1, I + 1 + I[0], k, out); break;
	case C_HINDEXED: ret = MPI_Type_create_hindexed(I[0], I + 1, A, k, out); break;
	case C_INDEXED_BLOCK: ret = MPI_Type_create_indexed_block(I[0], I[1], I + 2, k, out); break;
	case C_HINDEXED_BLOCK: ret = MPI_Type_create_hindexed_block(I[0], I[1], A, k, out); break;
	case C_RESIZED: ret = MPI_Type_create_resized(k, A[0], A[1], out); break;
	case C_SUBARRAY:
	case C_DARRAY: ret = build_array(r, k, out); break;
	default: ret = MPI_ERR_TYPE; break;
	}
	kid_done(r, 0, &k);
	return ret;
}

/* ---- the datatype queries of the program (functions.list: both) ---- */

/* a datatype MPI_Type_get_contents gave: a predefined one's neutral
 * number; an f90 one's (predefined too, MPI-3.1 17.1.9) the one it has;
 * a derived one a new number, which the program frees */
static uint32_t contents_type(MPI_Datatype t)
{
	int ni, na, nd, c;
	uint32_t n;

	MPI_Type_get_envelope(t, &ni, &na, &nd, &c);
	if (c == MPI_COMBINER_NAMED && (n = predefined_type(t)) != UINT32_MAX)
		return n;
	if (f90(comb_of(c)) && (n = lh_find(STS_DATATYPE, LH_HVAL(t))) != UINT32_MAX)
		return n;
	return lh_new(STS_DATATYPE, LH_HVAL(t));
}

int lh_Type_get_contents(uint32_t mtype, int mi, int ma, int md, int *ints, sts_aint *aints,
			 uint32_t *types)
{
	MPI_Datatype t = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, mtype), *rt;
	int ni = 0, na = 0, nd = 0, c = 0, ret = MPI_Type_get_envelope(t, &ni, &na, &nd, &c);

	if (ret != MPI_SUCCESS)
		return lh_err(ret);
	rt = malloc((size_t)(md > 0 ? md : 1) * sizeof(*rt));
	if (!rt)
		return lh_err(MPI_ERR_NO_MEM);
	ret = MPI_Type_get_contents(t, mi, ma, md, ints, (MPI_Aint *)aints, rt);
	if (ret == MPI_SUCCESS) {
		if (mi >= ni)   /* neutral; the upper half makes them its ABI's */
			translate_ints(comb_of(c), ints, ni, lh_order_out, lh_distrib_out, lh_darg_out);
		for (int i = 0; i < nd && i < md; i++)
			types[i] = contents_type(rt[i]);
	}
	free(rt);
	return lh_err(ret);
}

int lh_Get_elements_x(const struct sts_status *st, uint32_t dt, sts_count *count)
{
	MPI_Status s = { 0 };
	MPI_Count c = 0;
	int ret = MPI_Status_set_elements_x(&s, MPI_BYTE, st->count);

	if (ret == MPI_SUCCESS)
		ret = MPI_Get_elements_x(&s, (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, dt), &c);
	*count = c;
	return lh_err(ret);
}

int lh_Get_elements(const struct sts_status *st, uint32_t dt, int *count)
{
	sts_count c = 0;
	int ret = lh_Get_elements_x(st, dt, &c);

	*count = (int)c;
	return ret;
}

int lh_Status_set_elements_x(struct sts_status *st, uint32_t dt, sts_count count)
{
	MPI_Status s = { 0 };
	MPI_Count bytes = 0;
	int ret = MPI_Status_set_elements_x(&s, (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, dt),
					    count);

	if (ret == MPI_SUCCESS)
		ret = MPI_Get_elements_x(&s, MPI_BYTE, &bytes);
	st->count = bytes;
	return lh_err(ret);
}

int lh_Status_set_elements(struct sts_status *st, uint32_t dt, int count)
{
	return lh_Status_set_elements_x(st, dt, count);
}

/* ---- datatypes for lh_io.c (a file's view) ---- */

void *lh_type_record(MPI_Datatype t, uint32_t *pre)
{
	int ni, na, nd, c;

	*pre = UINT32_MAX;
	MPI_Type_get_envelope(t, &ni, &na, &nd, &c);
	if (c == MPI_COMBINER_NAMED) {
		*pre = predefined_type(t);
		return NULL;
	}
	return record_type(t);
}

int lh_type_bad(const void *rec)
{
	return rec && ((const struct rec_type *)rec)->comb == C_BAD;
}

int lh_type_build(const void *rec, MPI_Datatype *out)
{
	int ret = build_type(rec, out);

	if (ret == MPI_SUCCESS && !f90(((const struct rec_type *)rec)->comb))
		ret = MPI_Type_commit(out);
	return ret;
}

void lh_type_forget(void *rec)
{
	type_free_rec(rec);
}

/* ---- the datatypes of MPI_Alltoallw and MPI_Neighbor_alltoallw ---- */

#define STS_PEERS_CALL(f) MPI_##f
#include "sts_coll_peers.h"

int lh_coll_peers(MPI_Comm c, int neighbor, int out)
{
	return coll_peers(c, neighbor, out);
}

MPI_Datatype *lh_types_in(const uint32_t *v, int n)
{
	MPI_Datatype *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(*out));

	if (out)
		for (int i = 0; i < n; i++)
			out[i] = (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, v[i]);
	return out;
}

/* Arrays kept with a request until it is freed, in the lower half's own
 * memory: a request still holding one at a checkpoint is completed by the
 * drain, and the fresh lower half of a restart has none. */
static struct kept {
	uint32_t req;
	void *p;
} *kept;
static size_t nkept, kept_cap;

void lh_keep(uint32_t req, void *p)
{
	if (nkept == kept_cap) {
		size_t cap = kept_cap ? 2 * kept_cap : 16;
		struct kept *k = realloc(kept, cap * sizeof(*k));

		if (!k) {
			free(p);   /* both MPIs build their schedule at the call */
			return;
		}
		kept = k;
		kept_cap = cap;
	}
	kept[nkept++] = (struct kept){ req, p };
}

static void kept_free(uint32_t req)
{
	for (size_t i = 0; i < nkept; i++)
		if (kept[i].req == req) {
			free(kept[i].p);
			kept[i--] = kept[--nkept];
		}
}

/* ---- the hooks of lh_handles.c ---- */

void lh_state_created(int kind, uint32_t n)
{
	struct lh_slot *s = lh_slot_of(kind, n);
	uint64_t real;

	if (!s)
		return;
	real = s->real;
	switch (kind) {
	case STS_COMM:
		s->rec = record_comm((MPI_Comm)(LH_HCAST)real);
		/* (not with processes outside: they would not join the key's
		 * collective; a checkpoint is refused while it lives) */
		if (s->rec && ((struct rec_comm *)s->rec)->n > 0 && !outside(s->rec))
			lh_hooks.comm_made(n);
		break;
	case STS_GROUP:
		s->rec = record_group((MPI_Group)(LH_HCAST)real);
		break;
	case STS_DATATYPE:
		s->rec = record_type((MPI_Datatype)(LH_HCAST)real);
		break;
	case STS_OP:
		s->rec = lg_calloc(sizeof(struct rec_op));
		break;
	default:
		break;
	}
}

void lh_state_freed(int kind, uint32_t n)
{
	struct lh_slot *s = lh_slot_of(kind, n);

	if (kind == STS_REQUEST) {   /* its record is the handles' (lh_alloc) */
		if (nkept)
			kept_free(n);
		lh_hooks.request_gone(n);
		return;
	}
	if (!s || !s->rec)
		return;
	if (kind == STS_COMM)
		lh_hooks.comm_gone(n);
	if (kind == STS_DATATYPE)
		type_free_rec(s->rec);
	else if (kind == STS_FILE)
		lh_hooks.file_forget(s->rec);
	else
		lg_free(s->rec);
	s->rec = NULL;
}

/* ---- info objects: their pairs, read again at every checkpoint ---- */

struct rec_info {
	int n;                  /* pairs */
	char kv[];              /* n times: key, NUL, value, NUL */
};

/* one info object's pairs into a new record; NULL on an MPI error or
 * without memory */
static struct rec_info *record_info(MPI_Info info)
{
	char key[MPI_MAX_INFO_KEY + 1], *p;
	struct rec_info *r;
	size_t bytes = 0;
	int n = 0, len, flag;

	if (MPI_Info_get_nkeys(info, &n) != MPI_SUCCESS)
		return NULL;
	for (int i = 0; i < n; i++) {
		if (MPI_Info_get_nthkey(info, i, key) != MPI_SUCCESS ||
		    MPI_Info_get_valuelen(info, key, &len, &flag) != MPI_SUCCESS || !flag)
			return NULL;
		bytes += strlen(key) + 1 + (size_t)len + 1;
	}
	r = lg_calloc(sizeof(*r) + bytes);
	if (!r)
		return NULL;
	r->n = n;
	p = r->kv;
	for (int i = 0; i < n; i++) {
		size_t k;

		MPI_Info_get_nthkey(info, i, key);
		MPI_Info_get_valuelen(info, key, &len, &flag);
		k = strlen(key) + 1;
		memcpy(p, key, k);
		p += k;
		/* len characters and a NUL: counted above */
		if (MPI_Info_get(info, key, len, p, &flag) != MPI_SUCCESS || !flag) {
			lg_free(r);
			return NULL;
		}
		p[len] = 0;
		p += len + 1;
	}
	return r;
}

int lh_info_save(void)
{
	struct lh_table *t = &lh_lg->tables[STS_INFO];

	for (uint32_t n = STS_FIRST_USER; n < t->next; n++) {
		struct lh_slot *s = &t->slot[n];
		struct rec_info *r;

		if (s->real == t->slot[0].real)
			continue;   /* free */
		r = record_info((MPI_Info)(LH_HCAST)s->real);
		if (!r)
			return err_set(-EIO, "rank %d: cannot read the keys of an MPI_Info it created",
				       lh_lg->world_rank);
		lg_free(s->rec);
		s->rec = r;
	}
	return 0;
}

static int rebuild_info(struct lh_slot *s)
{
	const struct rec_info *r = s->rec;
	const char *p = r->kv;
	MPI_Info info;
	int ret = MPI_Info_create(&info);

	for (int i = 0; i < r->n && ret == MPI_SUCCESS; i++) {
		const char *v = p + strlen(p) + 1;

		ret = MPI_Info_set(info, p, v);
		p = v + strlen(v) + 1;
	}
	if (ret == MPI_SUCCESS)
		s->real = LH_HVAL(info);
	return ret;
}

void lh_state_op(uint32_t n, int slot, int commute)
{
	struct lh_slot *s = lh_slot_of(STS_OP, n);
	struct rec_op *r = s ? s->rec : NULL;

	if (r) {
		r->slot = slot;
		r->commute = commute;
	}
}

int lh_state_op_slot(uint32_t n)
{
	struct lh_slot *s = lh_slot_of(STS_OP, n);
	const struct rec_op *r = s ? s->rec : NULL;

	return r ? r->slot : -1;
}

static const char *const kind_names[] = STS_KIND_NAMES;

static const char *comb_name(int c)
{
	return c == MPI_COMBINER_NAMED ? "a predefined type Stasis does not know" :
	       c == MPI_COMBINER_SUBARRAY ? "MPI_Type_create_subarray (contents it cannot read)" :
	       c == MPI_COMBINER_DARRAY ? "MPI_Type_create_darray (contents it cannot read)" :
	       "an unsupported constructor";
}

static const struct rec_type *bad_part(const struct rec_type *r)
{
	if (r->comb == C_BAD && r->real_comb != MPI_COMBINER_NAMED)
		for (int i = 0; i < r->nd; i++)
			if (r->kids[i] && r->kids[i]->comb == C_BAD)
				return bad_part(r->kids[i]);
	return r;
}

void lh_state_unsupported(char *why, size_t len)
{
	*why = 0;
	for (int k = 0; k < STS_KINDS && !*why; k++) {
		const struct lh_table *t = &lh_lg->tables[k];

		for (uint32_t n = STS_FIRST_USER; n < t->next && !*why; n++) {
			const struct lh_slot *s = &t->slot[n];

			if (s->real == t->slot[0].real && !s->rec)
				continue;   /* free */
			if (k == STS_ERRHANDLER || (k == STS_WIN && !s->rec) ||
			    (k == STS_INFO && !s->rec)) {
				snprintf(why, len, "it holds an MPI_%s it created", kind_names[k]);
			} else if (!s->rec) {
				snprintf(why, len, "out of memory for the record of an MPI_%s", kind_names[k]);
			} else if (k == STS_FILE && lh_hooks.file_unsupported(s->rec)) {
				snprintf(why, len, "%s", lh_hooks.file_unsupported(s->rec));
			} else if (k == STS_COMM && outside(s->rec)) {
				snprintf(why, len, "it holds a communicator with processes outside "
					 "MPI_COMM_WORLD (its parent job's: MPI_Comm_get_parent)");
			} else if (k == STS_GROUP && ((struct rec_group *)s->rec)->n < 0) {
				snprintf(why, len, "it holds a group with members outside MPI_COMM_WORLD");
			} else if (k == STS_DATATYPE && ((struct rec_type *)s->rec)->comb == C_BAD) {
				snprintf(why, len, "it holds a datatype built with %s",
					 comb_name(bad_part(s->rec)->real_comb));
			} else if (k == STS_REQUEST) {
				const struct lh_req *q = s->rec;

				if (q->state == REQ_PENDING && q->kind != REQ_RECV)
					snprintf(why, len, "a non-blocking %s is still in progress",
						 q->kind == REQ_SEND ? "send" : "collective");
			}
		}
	}
}

/* ---- restart ---- */

struct live {
	struct lh_slot *s;
	int kind;
	uint32_t n;
};

static int cmp_seq(const void *a, const void *b)
{
	const struct live *x = a, *y = b;

	return x->s->seq < y->s->seq ? -1 : x->s->seq > y->s->seq;
}

/* c's topology again, without reordering: ranks stay those recorded */
static int topo_build(const struct rec_comm *r, MPI_Comm c, MPI_Comm *out)
{
	const int *t = r->v + r->n, nd = r->ndims;

	switch (r->topo) {
	case TOPO_CART:
		return MPI_Cart_create(c, nd, t, t + nd, 0, out);
	case TOPO_GRAPH:
		return MPI_Graph_create(c, nd, t, t + nd, 0, out);
	case TOPO_DIST: {
		int in = t[0], o = t[1], w = t[2];

		return MPI_Dist_graph_create_adjacent(
			c, in, t + 3, w ? (int *)t + 3 + in : MPI_UNWEIGHTED, o, t + 3 + 2 * in,
			w ? (int *)t + 3 + 2 * in + o : MPI_UNWEIGHTED, MPI_INFO_NULL, 0, out);
	}
	default:
		*out = c;
		return MPI_SUCCESS;
	}
}

static int rebuild_comm(struct lh_slot *s)
{
	const struct rec_comm *r = s->rec;
	MPI_Group g;
	MPI_Comm c, topo;
	int ret = MPI_Group_incl(world_group(), r->n, r->v, &g);

	if (ret != MPI_SUCCESS)
		return ret;
	ret = MPI_Comm_create_group(lh_world, g, 0x5354, &c);
	MPI_Group_free(&g);
	if (ret == MPI_SUCCESS && r->topo == TOPO_INTER) {
		/* the two groups' first members lead, over MPI_COMM_WORLD; both
		 * groups rebuild their objects in creation order */
		ret = MPI_Intercomm_create(c, 0, lh_world, r->v[r->n + 1], 0x5355, &topo);
		MPI_Comm_free(&c);
		c = topo;
	} else if (ret == MPI_SUCCESS && r->topo != TOPO_NONE) {
		ret = topo_build(r, c, &topo);
		MPI_Comm_free(&c);
		c = topo;
	}
	if (ret == MPI_SUCCESS)
		s->real = LH_HVAL(c);
	return ret;
}

static int repost(struct lh_slot *s)
{
	struct lh_req *q = s->rec;
	MPI_Request r;
	int ret;

	if (q->state != REQ_PENDING)
		return MPI_SUCCESS;
	if (q->kind != REQ_RECV)
		return MPI_ERR_REQUEST;   /* refused at the checkpoint: cannot happen */
	ret = MPI_Irecv(q->buf, q->count, (MPI_Datatype)(LH_HCAST)lh_real(STS_DATATYPE, q->datatype),
			lh_rank_in(q->peer), q->tag, (MPI_Comm)(LH_HCAST)lh_real(STS_COMM, q->comm), &r);
	if (ret == MPI_SUCCESS)
		s->real = LH_HVAL(r);
	return ret;
}

/* The recorded objects in creation order (*v to free); restart: every
 * slot's handle, free ones too, reset to this MPI's null first (they held
 * the other MPI's) */
static int live_objects(struct live **out, size_t *nout, int restart)
{
	struct live *v = NULL;
	size_t n = 0, cap = 0;

	for (int k = 0; k < STS_KINDS; k++) {
		struct lh_table *t = &lh_lg->tables[k];

		for (uint32_t i = STS_FIRST_USER; i < t->next; i++) {
			if (restart)
				t->slot[i].real = t->slot[0].real;
			if (!t->slot[i].rec)
				continue;
			if (n == cap) {
				struct live *w = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*w));

				if (!w) {
					free(v);
					return err_set(-ENOMEM, "out of memory");
				}
				v = w;
			}
			v[n++] = (struct live){ &t->slot[i], k, i };
		}
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_seq);
	*out = v;
	*nout = n;
	return 0;
}

static int mpi_failed(int ret, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING] = "";
	int len = 0;

	MPI_Error_string(ret, msg, &len);
	return err_set(-EPROTO, "cannot build %s again on this MPI: %s", what, msg);
}

void lh_state_unmovable(char *why, size_t len)
{
	static const int kinds[] = { STS_WIN, STS_FILE };

	*why = 0;
	for (unsigned i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && !*why; i++)
		if (lh_live(kinds[i]))
			snprintf(why, len, "rank %d holds an MPI_%s", lh_lg->world_rank,
				 kind_names[kinds[i]]);
	for (uint32_t c = STS_FIRST_USER; c < lh_lg->coll_cap && !*why; c++)
		if (lh_lg->retired[c])
			snprintf(why, len, "rank %d freed a communicator some member still holds",
				 lh_lg->world_rank);
	for (uint32_t n = STS_FIRST_USER; n < lh_lg->tables[STS_REQUEST].next && !*why; n++) {
		const struct lh_req *q = lh_lg->tables[STS_REQUEST].slot[n].rec;

		if (q && q->state == REQ_PENDING && q->kind != REQ_RECV)
			snprintf(why, len, "rank %d has a non-blocking operation in progress",
				 lh_lg->world_rank);
	}
}

/* A receive still posted after the drain matched nothing (every message
 * sent arrived, every rank is parked): cancelled, posted again on the
 * communicator made again (repost) */
static int recv_cancel(struct lh_slot *s)
{
	MPI_Request r = (MPI_Request)(LH_HCAST)s->real;
	MPI_Status st;
	int gone = 0, ret = MPI_Cancel(&r);

	ret = ret == MPI_SUCCESS ? MPI_Wait(&r, &st) : ret;
	if (ret == MPI_SUCCESS)
		MPI_Test_cancelled(&st, &gone);
	return ret != MPI_SUCCESS ? ret : gone ? MPI_SUCCESS : MPI_ERR_PENDING;
}

int lh_state_relink(void)
{
	struct live *v = NULL;
	size_t n = 0;
	int ret = live_objects(&v, &n, 0);

	if (ret)
		return ret;
	if (world_g != MPI_GROUP_NULL)
		MPI_Group_free(&world_g);
	ret = MPI_SUCCESS;
	for (size_t i = 0; i < n && ret == MPI_SUCCESS; i++)
		if (v[i].kind == STS_REQUEST && ((struct lh_req *)v[i].s->rec)->state == REQ_PENDING)
			ret = recv_cancel(v[i].s);
	for (size_t i = 0; i < n && ret == MPI_SUCCESS; i++) {
		struct lh_slot *s = v[i].s;

		if (v[i].kind == STS_REQUEST) {
			ret = repost(s);
		} else if (v[i].kind == STS_COMM) {
			MPI_Comm c = (MPI_Comm)(LH_HCAST)s->real;

			lh_hooks.comm_gone(v[i].n);
			if (c != MPI_COMM_NULL)
				MPI_Comm_free(&c);
			ret = rebuild_comm(s);
			if (ret == MPI_SUCCESS)
				lh_hooks.comm_made(v[i].n);
		} else if (v[i].kind == STS_GROUP) {
			const struct rec_group *r = s->rec;
			MPI_Group g = (MPI_Group)(LH_HCAST)s->real;

			if (g != MPI_GROUP_NULL)
				MPI_Group_free(&g);
			ret = MPI_Group_incl(world_group(), r->n, r->v, &g);
			if (ret == MPI_SUCCESS)
				s->real = LH_HVAL(g);
		}
	}
	free(v);
	return ret == MPI_SUCCESS ? 0 : mpi_failed(ret, "a communicator or a pending receive");
}

int lh_state_rebuild(void)
{
	struct live *v = NULL;
	size_t n = 0;
	int ret = live_objects(&v, &n, 1);
	char what[128] = "";

	if (ret)
		return ret;
	ret = MPI_SUCCESS;
	for (size_t i = 0; i < n && ret == MPI_SUCCESS; i++) {
		struct lh_slot *s = v[i].s;
		int k = v[i].kind;

		snprintf(what, sizeof(what), "MPI_%s", kind_names[k]);
		if (k == STS_COMM) {
			ret = rebuild_comm(s);
			if (ret == MPI_SUCCESS)
				lh_hooks.comm_made(v[i].n);
			if (ret == MPI_SUCCESS && lh_hooks.comm_retired(v[i].n)) {
				/* freed by the program, not yet by every member: only
				 * its key is needed, for the counts (agreed on it) */
				MPI_Comm c = (MPI_Comm)(LH_HCAST)s->real;

				if (!lh_hooks.comm_freeing(v[i].n, &c))
					MPI_Comm_free(&c);
				s->real = lh_lg->tables[STS_COMM].slot[0].real;
			}
		} else if (k == STS_GROUP) {
			const struct rec_group *r = s->rec;
			MPI_Group g;

			ret = MPI_Group_incl(world_group(), r->n, r->v, &g);
			if (ret == MPI_SUCCESS)
				s->real = LH_HVAL(g);
		} else if (k == STS_DATATYPE) {
			MPI_Datatype t;

			ret = lh_type_build(s->rec, &t);
			if (ret == MPI_SUCCESS)
				s->real = LH_HVAL(t);
		} else if (k == STS_FILE) {
			ret = lh_hooks.file_rebuild(s);
		} else if (k == STS_INFO) {
			ret = rebuild_info(s);
		} else if (k == STS_WIN) {
			ret = lh_hooks.win_rebuild(s);
		} else if (k == STS_OP) {
			const struct rec_op *r = s->rec;

			ret = lh_hooks.op_build(r->slot, r->commute, &s->real);
		} else if (k == STS_REQUEST) {
			snprintf(what, sizeof(what), "a pending receive");
			ret = repost(s);
		}
	}
	free(v);
	return ret == MPI_SUCCESS ? 0 : mpi_failed(ret, what);
}
