/* config.c - the configuration registry (see config.h).
 *
 * Values are validated when they are set, so the rest of Stasis can read them
 * without checking: a bad value in a file or the environment is reported once,
 * with its origin, by cfg_load().
 */
#include "common/config.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum cfg_type { STRING, CHOICE, UINT, SIZE };

struct cfg_def {
	const char *name;
	enum cfg_type type;
	const char *def;
	uint64_t min, max;
	const char *choices;
	const char *meaning;
};

static const struct cfg_def defs[CFG__COUNT] = {
#define CONFIG_KEY(id, n, t, d, lo, hi, ch, m) [CFG_##id] = { n, t, d, lo, hi, ch, m },
#include "common/config_keys.h"
#undef CONFIG_KEY
};

struct cfg_value {
	char text[PATH_MAX];
	uint64_t num;
	char origin[PATH_MAX + 32];
};

static struct cfg_value values[CFG__COUNT];
static int loaded;

int cfg_stage_level(const char *text)
{
	if (!strcmp(text, "off"))
		return 0;
	if (!strcmp(text, "zstd"))
		return 1;
	if (strncmp(text, "zstd:", 5) || !isdigit((unsigned char)text[5]) ||
	    strspn(text + 5, "0123456789") != strlen(text + 5) || strlen(text + 5) > 2 ||
	    atoi(text + 5) < 1 || atoi(text + 5) > 19)
		return -EINVAL;
	return atoi(text + 5);
}

int cfg_parse_size(const char *text, uint64_t *out)
{
	char *end;
	unsigned long long n;
	uint64_t mult = 1;

	if (!isdigit((unsigned char)text[0]))
		return -EINVAL;
	errno = 0;
	n = strtoull(text, &end, 10);
	if (errno)
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 'K': mult = 1ULL << 10; end++; break;
	case 'M': mult = 1ULL << 20; end++; break;
	case 'G': mult = 1ULL << 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end || n > UINT64_MAX / mult)
		return -EINVAL;
	*out = n * mult;
	return 0;
}

static int choice_ok(const char *choices, const char *value)
{
	size_t len = strlen(value);

	for (const char *p = choices; *p;) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);

		if (n == len && strncmp(p, value, n) == 0)
			return 1;
		p += n + (bar != NULL);
	}
	return 0;
}

/* Expand ${HOME} and ${UID} in built-in defaults. */
static void expand_default(const char *in, char *out, size_t size)
{
	const char *home = getenv("HOME");
	size_t o = 0;

	while (*in && o + 1 < size) {
		if (strncmp(in, "${HOME}", 7) == 0) {
			o += (size_t)snprintf(out + o, size - o, "%s", home ? home : "/tmp");
			in += 7;
		} else if (strncmp(in, "${UID}", 6) == 0) {
			o += (size_t)snprintf(out + o, size - o, "%u", (unsigned)getuid());
			in += 6;
		} else {
			out[o++] = *in++;
		}
		if (o >= size)
			o = size - 1;
	}
	out[o] = '\0';
}

/* Validate value for key and store it with its origin. */
static int assign(enum cfg_key key, const char *value, const char *origin)
{
	const struct cfg_def *d = &defs[key];
	struct cfg_value *v = &values[key];
	uint64_t num = 0;
	int ret;

	if (strlen(value) >= sizeof(v->text))
		return err_set(-EINVAL, "%s: value of '%s' is too long", origin, d->name);
	switch (d->type) {
	case STRING:
		if (key == CFG_STAGE_COMPRESS && cfg_stage_level(value) < 0)
			return err_set(-EINVAL, "%s: bad value '%s' for '%s' (expected off, zstd or "
				       "zstd:LEVEL with LEVEL 1-19)", origin, value, d->name);
		break;
	case CHOICE:
		if (!choice_ok(d->choices, value))
			return err_set(-EINVAL, "%s: bad value '%s' for '%s' (expected %s)",
				       origin, value, d->name, d->choices);
		break;
	case UINT:
	case SIZE:
		if (d->type == SIZE)
			ret = cfg_parse_size(value, &num);
		else
			ret = (isdigit((unsigned char)value[0]) &&
			       strspn(value, "0123456789") == strlen(value) && strlen(value) < 19) ? 0 : -EINVAL;
		if (ret == 0 && d->type == UINT)
			num = strtoull(value, NULL, 10);
		if (ret)
			return err_set(-EINVAL, "%s: bad value '%s' for '%s' (expected %s)", origin,
				       value, d->name, d->type == SIZE ? "a size such as 4M" : "a number");
		if (num < d->min || num > d->max)
			return err_set(-EINVAL, "%s: value %s for '%s' is out of range [%llu, %llu]",
				       origin, value, d->name, (unsigned long long)d->min,
				       (unsigned long long)d->max);
		if (key == CFG_CHUNK_SIZE && num % 4096)
			return err_set(-EINVAL, "%s: chunk_size %s is not a multiple of 4K", origin, value);
		break;
	}
	snprintf(v->text, sizeof(v->text), "%s", value);
	snprintf(v->origin, sizeof(v->origin), "%s", origin);
	v->num = num;
	return 0;
}

int cfg_lookup(const char *name, enum cfg_key *out)
{
	for (int i = 0; i < CFG__COUNT; i++) {
		if (strcmp(defs[i].name, name) == 0) {
			*out = (enum cfg_key)i;
			return 0;
		}
	}
	return err_set(-ENOENT, "unknown configuration key '%s' (see `stasis config --list`)", name);
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

static int load_file(const char *path, int must_exist)
{
	char line[PATH_MAX + 128], origin[PATH_MAX + 32];
	FILE *f = fopen(path, "r");
	unsigned lineno = 0;
	enum cfg_key key;
	int ret = 0;

	if (!f) {
		if (!must_exist && errno == ENOENT)
			return 0;
		return err_set(-errno, "config file %s: %s", path, strerror(errno));
	}
	while (fgets(line, sizeof(line), f)) {
		char *s = trim(line), *eq;

		lineno++;
		if (*s == '\0' || *s == '#')
			continue;
		snprintf(origin, sizeof(origin), "file %s:%u", path, lineno);
		eq = strchr(s, '=');
		if (!eq) {
			ret = err_set(-EINVAL, "%s: expected 'key = value'", origin);
			break;
		}
		*eq = '\0';
		if (cfg_lookup(trim(s), &key)) {
			ret = err_set(-EINVAL, "%s: unknown configuration key '%s'", origin, trim(s));
			break;
		}
		ret = assign(key, trim(eq + 1), origin);
		if (ret)
			break;
	}
	fclose(f);
	return ret;
}

static int load_env(void)
{
	char var[64], origin[96];
	const char *value;

	for (int i = 0; i < CFG__COUNT; i++) {
		size_t n = (size_t)snprintf(var, sizeof(var), "STASIS_%s", defs[i].name);

		for (size_t j = 7; j < n; j++)
			var[j] = (char)toupper((unsigned char)var[j]);
		value = getenv(var);
		if (!value)
			continue;
		snprintf(origin, sizeof(origin), "env %s", var);
		if (assign((enum cfg_key)i, value, origin))
			return -EINVAL;
	}
	return 0;
}

static int apply(void)
{
	enum log_level level;
	int ret;

	if (log_level_parse(values[CFG_LOG].text, &level) == 0)
		log_set_level(level);
	char why[256];

	ret = fault_configure(values[CFG_FAULT].text);
	if (ret) {
		snprintf(why, sizeof(why), "%s", err_msg());
		return err_set(ret, "%s: %s", values[CFG_FAULT].origin, why);
	}
	return 0;
}

static void load_defaults(void)
{
	char def[PATH_MAX];

	for (int i = 0; i < CFG__COUNT; i++) {
		expand_default(defs[i].def, def, sizeof(def));
		if (assign((enum cfg_key)i, def, "default"))
			log_error("bad built-in default for '%s': %s", defs[i].name, err_msg());
	}
	loaded = 1;
}

int cfg_load(const char *path)
{
	const char *env_path = getenv("STASIS_CONFIG");
	int ret;

	load_defaults();
	if (path)
		ret = load_file(path, 1);
	else if (env_path && *env_path)
		ret = load_file(env_path, 1);
	else
		ret = load_file("/etc/stasis/stasis.conf", 0);
	if (ret == 0)
		ret = load_env();
	if (ret == 0)
		ret = apply();
	return ret;
}

static void ensure_loaded(void)
{
	if (!loaded)
		load_defaults();
}

int cfg_set(const char *name, const char *value)
{
	enum cfg_key key;
	int ret;

	ensure_loaded();
	ret = cfg_lookup(name, &key);
	if (ret)
		return ret;
	ret = assign(key, value, "set");
	if (ret == 0 && (key == CFG_LOG || key == CFG_FAULT))
		ret = apply();
	return ret;
}

const char *cfg_str(enum cfg_key key)
{
	ensure_loaded();
	return values[key].text;
}

uint64_t cfg_u64(enum cfg_key key)
{
	ensure_loaded();
	return values[key].num;
}

const char *cfg_name(enum cfg_key key)
{
	return defs[key].name;
}

const char *cfg_meaning(enum cfg_key key)
{
	return defs[key].meaning;
}

const char *cfg_origin(enum cfg_key key)
{
	ensure_loaded();
	return values[key].origin;
}
