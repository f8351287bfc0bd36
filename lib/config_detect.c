/* SPDX-License-Identifier: MIT */
/*
 * config_detect: the detectors: block (which BPF detectors the daemon
 * loads and how they are tuned) and a guest's pidfile:, which tells them
 * the guest's QEMU process when the channels cannot (FIFOs).
 *   detectors:
 *     vcpu_starvation: {enabled: true, threshold: 100ms, min_interval: 1s}
 *     process_death: {on_clean_exit: false}
 *     guest_silence: {timeout: 5s}
 *     libvirt_events: {enabled: true, uri: qemu:///system}
 */
#include <errno.h>
#include <string.h>

#include "config-int.h"
#include "util.h"

#define THRESHOLD_MAX_MS (600 * SEC_MS)
#define INTERVAL_MAX_MS (3600 * SEC_MS)
#define SILENCE_DEFAULT_MS (5 * SEC_MS)
/* pings go every fifth of it: 100 ms at least keeps them to 50 a second */
#define SILENCE_MIN_MS 250
#define SILENCE_MAX_MS (3600 * SEC_MS)

static const struct {
	const char *name;
	unsigned settings;	/* VMT_DETS_* */
	uint32_t threshold_ms, min_interval_ms;
} detectors[VMT_DET_COUNT] = {
#define X(id, name, settings, threshold_ms, interval_ms) \
	[VMT_DET_##id] = { name, settings, threshold_ms, interval_ms },
	VMT_DETECTORS(X)
#undef X
};

unsigned detector_settings(unsigned id)
{
	return id < VMT_DET_COUNT ? detectors[id].settings : 0;
}

const char *detector_name(unsigned id)
{
	return id < VMT_DET_COUNT ? detectors[id].name : "unknown";
}

void config_detect_init(struct vmt_config *c)
{
	struct vmt_detector_conf *d = c->detectors;

	c->silence.enabled = 1;
	c->silence.timeout_ms = SILENCE_DEFAULT_MS;
	c->libvirt_events.enabled = 1;
	strcpy(c->libvirt_events.uri, "qemu:///system");
	memset(d, 0, VMT_DET_COUNT * sizeof(*d));
	for (unsigned i = 0; i < VMT_DET_COUNT; i++) {
		d[i].enabled = 1;
		d[i].threshold_ms = detectors[i].threshold_ms;
		d[i].min_interval_ms = detectors[i].min_interval_ms;
	}
}

static int det_enabled(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_detector_conf *d = obj;

	return yamlconf_read_bool(y, v, field, &d->enabled);
}

/* A duration in ms into a 32-bit field (every max here fits one). */
static int detect_read_ms(struct yamlconf *y, yaml_node_t *v, const char *field, uint64_t min_ms,
			  uint64_t max_ms, uint32_t *out)
{
	uint64_t ms;
	int r = yamlconf_read_duration(y, v, field, 1, min_ms, max_ms, &ms);

	if (r == 0)
		*out = (uint32_t)ms;
	return r;
}

static int det_threshold(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_detector_conf *d = obj;

	return detect_read_ms(y, v, field, 1, THRESHOLD_MAX_MS, &d->threshold_ms);
}

static int det_interval(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_detector_conf *d = obj;

	return detect_read_ms(y, v, field, 0, INTERVAL_MAX_MS, &d->min_interval_ms);
}

static int det_any(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_detector_conf *d = obj;

	return yamlconf_read_bool(y, v, field, &d->any_process);
}

static int det_clean_exit(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_detector_conf *d = obj;

	return yamlconf_read_bool(y, v, field, &d->on_clean_exit);
}

/* Each detector takes only the keys that mean something to it. */
static const struct yamlconf_key plain_keys[] = {
	{ "enabled", det_enabled },
	{ "min_interval", det_interval },
};

static const struct yamlconf_key threshold_keys[] = {
	{ "enabled", det_enabled },
	{ "threshold", det_threshold },
	{ "min_interval", det_interval },
};

static const struct yamlconf_key oom_keys[] = {
	{ "enabled", det_enabled },
	{ "min_interval", det_interval },
	{ "any_process", det_any },
};

static const struct yamlconf_key death_keys[] = {
	{ "enabled", det_enabled },
	{ "min_interval", det_interval },
	{ "on_clean_exit", det_clean_exit },
};

static int detector_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			  struct vmt_detector_conf *d, unsigned id)
{
	unsigned settings = detector_settings(id);

	if (settings & VMT_DETS_THRESHOLD)
		return yamlconf_read_block(y, v, field, "detector settings", threshold_keys,
					   ARRAY_SIZE(threshold_keys), d);
	if (settings & VMT_DETS_ANY_PROCESS)
		return yamlconf_read_block(y, v, field, "detector settings", oom_keys,
					   ARRAY_SIZE(oom_keys), d);
	if (settings & VMT_DETS_CLEAN_EXIT)
		return yamlconf_read_block(y, v, field, "detector settings", death_keys,
					   ARRAY_SIZE(death_keys), d);
	return yamlconf_read_block(y, v, field, "detector settings", plain_keys,
				   ARRAY_SIZE(plain_keys), d);
}

#define X(id, name, settings, threshold_ms, interval_ms)                                \
	static int det_##id(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj) \
	{                                                                                   \
		struct vmt_config *c = obj;                                                 \
		return detector_parse(y, v, field, &c->detectors[VMT_DET_##id], VMT_DET_##id); \
	}
VMT_DETECTORS(X)
#undef X

static int silence_enabled(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_silence_conf *s = obj;

	return yamlconf_read_bool(y, v, field, &s->enabled);
}

static int silence_timeout(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_silence_conf *s = obj;

	return detect_read_ms(y, v, field, SILENCE_MIN_MS, SILENCE_MAX_MS, &s->timeout_ms);
}

static const struct yamlconf_key silence_keys[] = {
	{ "enabled", silence_enabled },
	{ "timeout", silence_timeout },
};

/* guest_silence: {enabled: true, timeout: 5s} */
static int det_silence(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return yamlconf_read_block(y, v, field, "detector settings", silence_keys,
				   ARRAY_SIZE(silence_keys), &c->silence);
}

static int lv_enabled(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return yamlconf_read_bool(y, v, field, &((struct vmt_lvevents_conf *)obj)->enabled);
}

static int lv_uri(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_lvevents_conf *l = obj;
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a libvirt URI", false, &s);
	if (r < 0)
		return r;
	if (!s[0])
		return yamlconf_error(y, v, field, "a libvirt URI (qemu:///system) is needed");
	if (strlen(s) >= sizeof(l->uri))
		return yamlconf_error(y, v, field, "too long (at most %zu bytes)", sizeof(l->uri) - 1);
	for (const char *q = s; *q; q++)
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			return yamlconf_error(y, v, field, "holds a control character");
	strcpy(l->uri, s);
	return 0;
}

static const struct yamlconf_key lvevents_keys[] = {
	{ "enabled", lv_enabled },
	{ "uri", lv_uri },
};

/* libvirt_events: {enabled: true, uri: qemu:///system} */
static int det_lvevents(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return yamlconf_read_block(y, v, field, "detector settings", lvevents_keys,
				   ARRAY_SIZE(lvevents_keys), &c->libvirt_events);
}

static const struct yamlconf_key detector_keys[] = {
#define X(id, name, settings, threshold_ms, interval_ms) { name, det_##id },
	VMT_DETECTORS(X)
#undef X
	{ "guest_silence", det_silence },
	{ "libvirt_events", det_lvevents },
};

int config_detect_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			struct vmt_config *c)
{
	return yamlconf_read_block(y, v, field, "detectors", detector_keys,
				   ARRAY_SIZE(detector_keys), c);
}

/* An absolute file name; "" or null: none (what config_print writes). */
int config_guest_pidfile(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst)
{
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a pidfile path", true, &s);
	if (r < 0)
		return r;
	if (!s[0]) {
		dst[0] = 0;
		return 0;
	}
	return yamlconf_read_path(y, v, field, false, DIR_MAX, dst);
}
