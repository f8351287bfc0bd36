/* SPDX-License-Identifier: MIT */
/*
 * config-int: what the files of the config module share, not for other
 * modules. config.c reads the top level and the daemon-wide blocks and
 * hands record:/host: to config_record.c, guests:/discovery: to
 * config_guests.c; config_print.c writes the result back out. All of them
 * read YAML through yamlconf.h.
 */
#ifndef VMT_CONFIG_INT_H
#define VMT_CONFIG_INT_H

#include "config.h"
#include "yamlconf.h"

/* Room under PATH_MAX for the guest folders and sample names below it. */
#define DIR_MAX 3840
#define SUN_PATH_MAX 107	/* sizeof(sockaddr_un.sun_path) - 1 */

/* config.c */
const char *config_log_level_name(int level);

/* config_record.c: override the keys given; the rest stays as it was. */
int config_record_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			struct vmt_record_conf *rec, bool top);
int config_host_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
		      struct vmt_host_conf *h);

/*
 * config_guests.c: fill c->guests (after c->rec, which they copy) and
 * c->discovery (after the guests, whose paths it checks).
 */
int config_guests_parse(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v);
int config_discovery_parse(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v);

/* config_detect.c: detectors: and a guest's pidfile: */
void config_detect_init(struct vmt_config *c);
int config_detect_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			struct vmt_config *c);
int config_guest_pidfile(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst);

/* config_fleet.c: fleet: and a guest's labels: */
void config_fleet_init(struct vmt_fleet_conf *f);
int config_fleet_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
		       struct vmt_fleet_conf *f);
int config_guest_labels(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst,
			size_t size);
void config_fleet_print(const struct vmt_config *c, FILE *f);

#endif
