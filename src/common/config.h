/* config.h - the configuration registry.
 *
 * Every key is declared once in config_keys.h. Values come, in increasing
 * precedence, from the built-in default, the configuration file, the
 * environment (STASIS_<KEY>) and cfg_set() (command-line options, API calls).
 * The registry remembers where each value came from for `stasis config --list`.
 * Stasis never writes the configuration file.
 */
#ifndef STASIS_COMMON_CONFIG_H
#define STASIS_COMMON_CONFIG_H

#include <stdint.h>

enum cfg_key {
#define CONFIG_KEY(id, name, type, def, min, max, choices, meaning) CFG_##id,
#include "common/config_keys.h"
#undef CONFIG_KEY
	CFG__COUNT
};

/* Load the registry: defaults, then the file at path (NULL: $STASIS_CONFIG if
 * set, else /etc/stasis/stasis.conf if it exists), then the environment. Also
 * applies `log` and `fault`. -EINVAL/-ENOENT/... with a one-line message
 * (err.h) naming the file and line or variable on bad input. Not thread-safe:
 * call once before starting threads. */
int cfg_load(const char *path);

/* Set a key by name from the command line or an API; validated like a file
 * value. -ENOENT for an unknown key, -EINVAL for a bad value (err.h). */
int cfg_set(const char *name, const char *value);

/* Find a key by name; -ENOENT with a message if there is none. */
int cfg_lookup(const char *name, enum cfg_key *out);

/* Current value: as text, or as a number for UINT and SIZE keys. */
const char *cfg_str(enum cfg_key key);
uint64_t cfg_u64(enum cfg_key key);

/* Description for listings: name, meaning and where the value came from
 * ("default", "file /etc/stasis/stasis.conf:3", "env STASIS_LOG", "set"). */
const char *cfg_name(enum cfg_key key);
const char *cfg_meaning(enum cfg_key key);
const char *cfg_origin(enum cfg_key key);

/* Parse a byte count with an optional K/M/G (powers of 1024) suffix. */
int cfg_parse_size(const char *text, uint64_t *out);

/* The zstd level a stage_compress value asks for: 0 for "off", 1 for
 * "zstd", N for "zstd:N" (1-19); -EINVAL for anything else. */
int cfg_stage_level(const char *text);

#endif
