/* SPDX-License-Identifier: MIT */
/*
 * tdlink HOST.dat GUEST.dat: how libtracecmd links a merged host and guest,
 * for the end-to-end suite. Prints
 *   guest NAME vcpus N pids P0 P1 ...   (tracecmd_get_guest_cpumap on the host)
 *   shift NS                            (guest time moved by TIME_SHIFT)
 *   host FIRST LAST EVENTS              (ns)
 *   guest FIRST LAST EVENTS             (ns, on the host's time line)
 *   event NAME COUNT                    (guest events per name)
 * Exit 1 if a file does not open or the host does not know the guest.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <trace-cmd.h>

#include "testd.h"

/* Exported by libtracecmd 1.3 but declared only in its private header. */
int tracecmd_enable_tsync(struct tracecmd_input *handle, bool enable);

struct span {
	unsigned long long first, last, n;
	struct tally_names names;
};

static int span_cb(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct span *s = data;
	struct tep_event *ev = tep_find_event_by_record(tracecmd_get_tep(h), rec);

	if (!s->n || rec->ts < s->first)
		s->first = rec->ts;
	if (rec->ts > s->last)
		s->last = rec->ts;
	s->n++;
	tally_name(&s->names, ev ? ev->name : NULL);
	return 0;
}

static struct tracecmd_input *open_or_die(const char *path, struct span *s)
{
	struct tracecmd_input *h = tracecmd_open(path, 0);

	if (!h) {
		fprintf(stderr, "tdlink: libtracecmd cannot open %s\n", path);
		exit(1);
	}
	memset(s, 0, sizeof(*s));
	tracecmd_iterate_events(h, NULL, 0, span_cb, s);
	return h;
}

int main(int argc, char **argv)
{
	struct tracecmd_input *host, *guest;
	struct span hs, gs, raw;
	const char *name;
	const int *pids;
	int vcpus;

	if (argc != 3) {
		fprintf(stderr, "usage: tdlink HOST.dat GUEST.dat\n");
		return 2;
	}
	host = open_or_die(argv[1], &hs);
	guest = open_or_die(argv[2], &gs);
	if (tracecmd_get_guest_cpumap(host, tracecmd_get_traceid(guest), &name, &vcpus, &pids) < 0) {
		fprintf(stderr, "tdlink: %s has no GUEST option for the trace id of %s\n", argv[1], argv[2]);
		return 1;
	}
	printf("guest %s vcpus %d pids", name, vcpus);
	for (int i = 0; i < vcpus; i++)
		printf(" %d", pids[i]);
	printf("\n");
	tracecmd_close(guest);
	/* again without the shift, to see it */
	guest = tracecmd_open(argv[2], 0);
	if (!guest || tracecmd_enable_tsync(guest, false) < 0) {
		fprintf(stderr, "tdlink: %s: no time shift to turn off\n", argv[2]);
		return 1;
	}
	memset(&raw, 0, sizeof(raw));
	tracecmd_iterate_events(guest, NULL, 0, span_cb, &raw);
	printf("shift %lld\n", (long long)(gs.first - raw.first));
	printf("host %llu %llu %llu\n", hs.first, hs.last, hs.n);
	printf("guest %llu %llu %llu\n", gs.first, gs.last, gs.n);
	for (unsigned i = 0; i < gs.names.nev; i++)
		printf("event %s %llu\n", gs.names.ev[i].name, (unsigned long long)gs.names.ev[i].n);
	tracecmd_close(guest);
	tracecmd_close(host);
	return 0;
}
