/* fault_points.h - every fault point of Stasis, in one list.
 *
 * FAULT_POINT(id, "name", "where it fires"). `stasis faults` prints this list;
 * STASIS_FAULT=<name>[:<n>][:kill|:fail] arms one (see fault.h). Keep the
 * commit path's points in the order a checkpoint passes through them: the
 * fault-walk test relies on that list, not on this comment.
 */
FAULT_POINT(IMAGE_CHUNK_WRITE,   "image.chunk.write",   "before a chunk of an image is handed to its sink (n-th chunk)")
FAULT_POINT(IMAGE_FINISH,        "image.finish",        "before an image's manifest and footer are written")
FAULT_POINT(STORE_FILE_WRITE,    "store.file.write",    "before a write(2) of data into a checkpoint's *.tmp file")
FAULT_POINT(STORE_FILE_FSYNC,    "store.file.fsync",    "before the fsync of a finished *.tmp file")
FAULT_POINT(STORE_FILE_RENAME,   "store.file.rename",   "before a *.tmp file is renamed to its final name")
FAULT_POINT(STORE_DIR_FSYNC,     "store.dir.fsync",     "before the fsync of the checkpoint directory after a rename")
FAULT_POINT(STORE_INDEX_APPEND,  "store.index.append",  "before a record is appended to a job's index")
FAULT_POINT(STORE_INDEX_TORN,    "store.index.torn",    "after half of an index record is written (a torn append)")
FAULT_POINT(STORE_INDEX_FSYNC,   "store.index.fsync",   "after an index record is written, before its fsync")
FAULT_POINT(STORE_CKPT_COMMIT,   "store.ckpt.commit",   "before the COMPLETE record of a checkpoint is appended")
FAULT_POINT(API_CKPT_WRITE,      "api.ckpt.write",      "before a rank writes its image of an application-level checkpoint")
FAULT_POINT(API_CKPT_COMMIT,     "api.ckpt.commit",     "before rank 0 establishes an application-level checkpoint in the job index")
FAULT_POINT(API_UPGRADE_BEGIN,   "api.upgrade.begin",   "before a progress thread starts an established checkpoint's upgrade (partner, rs, flush)")
FAULT_POINT(API_UPGRADE_LEVEL,   "api.upgrade.level",   "before rank 0 records the level an upgrade reached")
FAULT_POINT(SPLIT_RANK_WRITE,    "split.rank.write",    "before a rank of an MPI job writes its image (with STASIS_FAULT_RANK=R: rank R only)")
FAULT_POINT(NODE_COPY,            "node.copy",           "before each piece (up to 4 MiB) the node agent copies of a staged image into the global tier, from the first one read while the rank still writes the image; each chunk with stage_compress (n-th piece; :kill ends the agent mid-copy)")
FAULT_POINT(NODE_COPY_COMMIT,     "node.copy.commit",    "once the checkpoint is sealed, before the node agent commits a rank's whole copy in the global tier (n-th copy; :kill ends the agent with the copy uncommitted)")
FAULT_POINT(NODE_COPY_CORRUPT,    "node.copy.corrupt",   "with :fail, flips a byte of the n-th 4 MiB piece (with stage_compress, chunk payload) the node agent copies of a staged image, as a bad page would (the chunk CRC check must refuse the copy)")
FAULT_POINT(NODE_LEVEL,           "node.level",          "when a node agent's member of a rank begins the level's copies of a checkpoint (partner copies, rs parity), the n-th time in that agent (:fail: the level stays where it was, :kill: the agent dies mid-level)")
FAULT_POINT(REDUN_PARTNER_SEND,   "redun.partner.send",  "before the last piece of each partner copy a member sends (n-th copy; the whole copy when members hold unequal numbers of copies): :fail fails the member's level, :kill ends the process mid-copy")
FAULT_POINT(REDUN_PARTNER_RECV,   "redun.partner.recv",  "when the last piece of each partner copy a member receives has arrived, before it is filed (n-th copy): :fail drops the copy, :kill leaves an incomplete *.tmp that no restart selects")
FAULT_POINT(REDUN_RS_ENCODE,      "redun.rs.encode",     "before the parity of the last slice of each rs encode a member computes (n-th encode): :fail drops its parity image, :kill leaves an incomplete *.tmp")
FAULT_POINT(REDUN_GLOBAL_COPY,    "redun.global.copy",   "before the last piece of each file the redundancy engine copies into the global tier (level global, libstasis's flush; n-th file)")
FAULT_POINT(NODE_AGENT_CKPT,      "node.agent.ckpt",     "when the node agent gets the n-th CHECKPOINT from the coordinator, before it tells its ranks (:kill: the agent dies alone at the worst moment)")
FAULT_POINT(NODE_NO_RANK,         "node.no_rank",        "each time a node agent that no rank of its node has reached yet looks whether it waited too long (:fail: it gives up at once, as after 300 s; a job with spare ranks never gives up: a node may hold only spares)")
FAULT_POINT(NODE_MIGRATE,         "node.migrate",        "before each 4 MiB piece of a migrating rank's image the source node's agent sends to the target node (:fail: the migration fails and automatic recovery takes over; :kill: the source agent dies mid-transfer)")
FAULT_POINT(SPLIT_COLL_DUP,       "split.coll.dup",      "when the members of a communicator the program made agree on its key, to count its collectives (n-th one; on every rank): :fail leaves it without, as when that collective fails")
FAULT_POINT(SPLIT_COLL_ROUND,     "split.coll.round",    "when a rank of an MPI job gathers its collective counts for a round of a checkpoint (n-th round; with STASIS_FAULT_RANK=R: rank R only): :fail as when it has no memory for them")
FAULT_POINT(SPLIT_MOVE_RELINK,    "split.move.relink",   "when a rank that stays makes its communicators again, a move into a spare agreed by every rank: :fail as if it could not")
FAULT_POINT(SPLIT_SPARE_ADOPT,    "split.spare.adopt",   "when a spare rank that became a moved rank restored its image, before it registers: it dies (:fail as :kill)")
FAULT_POINT(SPLIT_MPIX_LATE,      "split.mpix.late",     "after MPIX_Checkpoint's barrier, before its request; with :fail the rank stays 2 s in the program there, stoppable, as a descheduled rank would (with STASIS_FAULT_RANK=R: rank R only)")
FAULT_POINT(STORE_PRUNE_REMOVE,  "store.prune.remove",  "after a PRUNED record, before the checkpoint's files are removed")
