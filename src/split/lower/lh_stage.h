/* lh_stage.h - node-local staging of a rank's image (lh_stage.c,
 * docs/split.md "Node-local staging"). Everything is off unless the job
 * runs with staging on (STASIS_STAGE_DIR in the rank's environment). */
#ifndef STS_LH_STAGE_H
#define STS_LH_STAGE_H

#include <stddef.h>

struct store;

/* Staging is on for this rank */
int lh_stage_on(void);
/* The node-local store the rank writes its image into (NULL: staging off,
 * or the local directory cannot be opened: the global tier then) */
struct store *lh_stage_store(void);
/* Where the rank's image of checkpoint name is in a node's local
 * directory, the same path on every node */
int lh_stage_path(const char *name, int rank, char *out, size_t len);
/* At a restart from restore_dir (the checkpoint's directory in the global
 * tier): the image the rank reads, its node-local copy when there is one
 * (said at info level); -ENOENT and a message when there is none at all */
int lh_stage_image(const char *restore_dir, int rank, char *out, size_t len);
/* A spare that restored its image of a move's cut (read from path): the
 * cut is no checkpoint, so its node-local copy goes, and its directory
 * when that is empty; a copy read from elsewhere is left alone */
void lh_stage_drop_cut(const char *name, int rank, const char *path);

/* Restart after a node's loss (docs/levels.md): whether the rank's node
 * still has its image of the checkpoint in restore_dir; whether that
 * checkpoint reached level partner or rs (its layout is there); and the
 * rebuild, collective over every rank of the job, through the node's agent
 * (node_level.h): out gets the image to read, or (-ENODATA) the one line
 * refusing the restart. */
int lh_stage_has_local(const char *restore_dir, int rank);
int lh_stage_leveled(const char *restore_dir);
int lh_stage_rebuild(const char *restore_dir, int rank, int size, int have_own, char *out,
		     size_t len);

#endif
