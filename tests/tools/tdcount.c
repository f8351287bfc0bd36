/* SPDX-License-Identifier: MIT */
/*
 * tdcount FILE: events per CPU of a trace.dat, as libtracecmd decodes them:
 * "cpuN COUNT" lines and "total COUNT". For the shell end-to-end suites.
 */
#include <stdio.h>
#include <stdlib.h>

#include "testd.h"

int main(int argc, char **argv)
{
	uint64_t per_cpu[256], total;
	unsigned last = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: tdcount FILE.dat\n");
		return 2;
	}
	if (tdread_counts(argv[1], per_cpu, 256, &total) < 0) {
		fprintf(stderr, "tdcount: libtracecmd cannot open %s\n", argv[1]);
		return 1;
	}
	for (unsigned c = 0; c < 256; c++)
		if (per_cpu[c])
			last = c + 1;
	for (unsigned c = 0; c < last; c++)
		printf("cpu%u %llu\n", c, (unsigned long long)per_cpu[c]);
	printf("total %llu\n", (unsigned long long)total);
	return 0;
}
