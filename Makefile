# vmtraced: one Makefile, no generator. `make help` lists the targets.
# Libraries are found with pkg-config; V=1 shows the commands.

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# vmtracectl's bash completion: installed when the tree has it
BASH_COMPLETION ?= tools/vmtracectl.bash
DESTDIR    ?=

O          ?= build
CC         ?= cc
CLANG      ?= clang
PKG_CONFIG ?= pkg-config
CFLAGS     ?= -O2 -g
VERSION    := 0.1.0

ifeq ($(V),1)
Q :=
else
Q := @
endif

ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
	-DVMT_SCHEMA_STRICT
endif

PKGS       := libsystemd libtracefs libtraceevent libzstd liblz4 yaml-0.1
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
TCMD_LIBS  := $(shell $(PKG_CONFIG) --libs libtracecmd 2>/dev/null)
TCMD_CFLAGS:= $(shell $(PKG_CONFIG) --cflags libtracecmd 2>/dev/null)
CHECK_LIBS := $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

WARN       := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2
BASE_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -DVMT_VERSION='"$(VERSION)"' \
	-DVMT_HAVE_JOURNAL -Ilib $(SANFLAGS) $(CPPFLAGS)
ALL_CFLAGS := $(BASE_CFLAGS) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS     := $(PKG_LIBS) -lpthread

LIB_SRCS    := $(wildcard lib/*.c)
DAEMON_SRCS := $(wildcard daemon/*.c)
CTL_SRCS    := $(wildcard ctl/*.c)
AGENT_SRCS  := $(wildcard agent/*.c)
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
INTEG_SRCS  := $(wildcard tests/integration/test_*.c)
TESTLIB_SRCS:= $(wildcard tests/lib/*.c)

LIB_OBJS    := $(LIB_SRCS:%.c=$(O)/%.o)
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(O)/%.o)
CTL_OBJS    := $(CTL_SRCS:%.c=$(O)/%.o)
TESTLIB_OBJS:= $(TESTLIB_SRCS:%.c=$(O)/%.o)
UNIT_BINS   := $(UNIT_SRCS:tests/unit/%.c=$(O)/tests/%)
INTEG_BINS  := $(INTEG_SRCS:tests/integration/%.c=$(O)/tests/%)

LIBVMT      := $(O)/libvmt.a
# A program's own pure modules (no event loop, no manager): linked into the
# program with the rest of its folder, and archived apart for the tests,
# which link them ahead of libvmt.
DAEMON_PURE_SRCS := daemon/ring.c daemon/ring-adopt.c daemon/ring-queue.c daemon/ring-schema.c daemon/frames.c \
	daemon/ringmem.c daemon/persist.c daemon/fdstore.c \
	daemon/pagepool.c daemon/retention.c daemon/retention-plan.c daemon/fleet-json.c \
	daemon/fleet-reply.c daemon/lvmeta-xml.c daemon/lvmeta-dl.c
CTL_PURE_SRCS := ctl/tracedat.c
LIBVMTD     := $(O)/libvmtd.a
LIBVMTCTL   := $(O)/libvmtctl.a
TEST_LIBS   := $(LIBVMTD) $(LIBVMTCTL) $(LIBVMT)
PROGS       := $(O)/vmtraced $(O)/vmtracectl $(O)/vmtrace-agent

.PHONY: layering all tests check check-stress check-unit check-integration check-e2e demo deps \
	install install-agent uninstall uninstall-agent deb clean help bench soak corpus
all: $(PROGS)

help:
	@echo "make            build vmtraced, vmtracectl, vmtrace-agent into $(O)/"
	@echo "make check      install missing packages (as root), run every test suite"
	@echo "make check-stress  the suites while stress-ng loads every CPU and the disk"
	@echo "make demo       boot a small guest under QEMU, record it, dump, merge, report"
	@echo "make install    install vmtraced, vmtracectl, config, units, man pages (DESTDIR, PREFIX)"
	@echo "make install-agent  install vmtrace-agent, its unit and udev rule (guest images)"
	@echo "make uninstall  remove what make install put (not the configuration); uninstall-agent"
	@echo "make deb        build vmtraced and vmtrace-agent .deb packages into $(O)/deb/"
	@echo "make bench      run the benchmarks under bench/"
	@echo "make soak       64 guests flooding for SOAK_SECONDS (600): RSS, fds, dumps"
	@echo "make fuzz       fuzz every parser of guest and file input (FUZZ_TIME=60 s each)"
	@echo "make deps       install the Debian packages that are missing (root only)"
	@echo "make layering   check the sources against docs/design.ini (run by make check)"
	@echo "make clean      remove $(O)/"

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<" $(if $(Q),,)
	$(Q)$(CC) $(ALL_CFLAGS) $(TCMD_CFLAGS) -MMD -MP -c -o $@ $<

$(LIBVMT): $(LIB_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBVMTD): $(DAEMON_PURE_SRCS:%.c=$(O)/%.o)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^
$(LIBVMTCTL): $(CTL_PURE_SRCS:%.c=$(O)/%.o)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# the daemon alone drops its capabilities (libcap) and filters its system
# calls (libseccomp)
# The optional libraries are loaded with dlopen() when the configuration
# needs them (lib/dlopen.h), never linked: their -dev packages give the
# headers only. The fleet (daemon/fleet*.c, ctl/fleet*.c, lib/dlnats.c):
# NATS, and SHA-256 for the object store's digest; the tests that speak
# NATS themselves link them.
FLEET_LIBS  := $(shell $(PKG_CONFIG) --libs libnats libcrypto 2>/dev/null)
# the fleet's labels from libvirt domain metadata and the guests' crashes
# libvirt reports (daemon/lvmeta*.c, the daemon alone): the libvirt client
# library, and libxml2 to read the element
LVMETA_CFLAGS := $(shell $(PKG_CONFIG) --cflags libxml-2.0 libvirt 2>/dev/null)
$(patsubst %.c,$(O)/%.o,$(wildcard daemon/lvmeta*.c)): ALL_CFLAGS += $(LVMETA_CFLAGS)
DAEMON_LIBS := $(shell $(PKG_CONFIG) --libs libcap libseccomp 2>/dev/null)
ifeq ($(SAN),1)
# ASan intercepts libtirpc's xdr_* and looks the real ones up once, at
# start: linked, they are there when libvirt, loaded later, calls them
# (else a call through NULL in virNetMessageEncodeHeader)
DAEMON_LIBS += -Wl,--push-state,--no-as-needed $(shell $(PKG_CONFIG) --libs libtirpc 2>/dev/null) \
	-Wl,--pop-state
endif
$(O)/vmtraced: $(DAEMON_OBJS) $(LIBVMT)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(DAEMON_LIBS) $(BPF_LIBS)

# test_upgrade's successor of another hand-over layout: the same daemon
# with VMT_UPGRADE_LAYOUT 2, a real binary the upgrade execs
$(O)/tests/upgrade-layout2.o: daemon/upgrade.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (layout 2)"
	$(Q)$(CC) $(ALL_CFLAGS) -DVMT_UPGRADE_LAYOUT=2u -MMD -MP -c -o $@ $<
$(O)/tests/vmtraced-layout2: $(filter-out $(O)/daemon/upgrade.o,$(DAEMON_OBJS)) \
		$(O)/tests/upgrade-layout2.o $(LIBVMT)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(DAEMON_LIBS) $(BPF_LIBS)

$(O)/vmtracectl: $(CTL_OBJS) $(LIBVMT)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The agent runs in a minimal guest initramfs: a static binary with no
# sanitizer (static ASan is not supported), built on its own.
AGENT_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -DVMT_VERSION='"$(VERSION)"' -Ilib \
	$(shell $(PKG_CONFIG) --cflags libtracefs 2>/dev/null) $(CPPFLAGS) -O2 -g
AGENT_LIB_SRCS := lib/proto.c lib/util.c lib/meta.c lib/log.c lib/ftmeta.c
$(O)/agent-objs/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (agent)"
	$(Q)$(CC) $(AGENT_CFLAGS) -MMD -MP -c -o $@ $<
$(O)/vmtrace-agent: $(AGENT_SRCS:%.c=$(O)/agent-objs/%.o) $(AGENT_LIB_SRCS:%.c=$(O)/agent-objs/%.o)
	@echo "  LD      $@ (static)"
	$(Q)$(CC) -static $(LDFLAGS) -o $@ $^ $(shell $(PKG_CONFIG) --static --libs libtracefs 2>/dev/null) -lpthread

# Tests: each tests/unit/test_X.c is one Check suite linked with libvmt and
# the programs' pure modules; those that test one find its folder's headers.
TEST_INC    := -Itests/lib
$(O)/tests/test_ring $(O)/tests/test_cring $(O)/tests/test_persist $(O)/tests/test_retention \
	$(O)/tests/test_daemon $(O)/tests/test_hostile $(O)/tests/test_fleetjson \
	$(O)/tests/test_lvmeta: TEST_INC += -Idaemon
$(O)/tests/test_tracedat: TEST_INC += -Ictl
$(O)/tests/test_dumps: TEST_INC += -Idaemon	# VMT_DUMP_POSTED_MAX
# the compressor's sharing, driven by hand (no thread)
$(O)/tests/test_cring: $(O)/daemon/compress.o $(O)/daemon/ring-queue.o $(O)/daemon/worker.o
$(O)/tests/test_cring: LDLIBS += $(LIBVMT)
$(O)/tests/test_worker: TEST_INC += -Idaemon
$(O)/tests/test_worker: $(O)/daemon/worker.o
$(O)/tests/test_worker: LDLIBS += $(LIBVMT)
# test_fleet speaks NATS itself for the hostile requests
$(O)/tests/test_fleet $(O)/tests/test_fleet_attack $(O)/tests/test_fleetnet: CHECK_LIBS += $(FLEET_LIBS)
$(O)/tests/%: tests/unit/%.c $(TESTLIB_OBJS) $(TEST_LIBS)
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(TCMD_CFLAGS) $(TEST_INC) -o $@ $^ $(TCMD_LIBS) $(LDLIBS) $(CHECK_LIBS)
$(O)/tests/%: tests/integration/%.c $(TESTLIB_OBJS) $(TEST_LIBS)
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(TCMD_CFLAGS) $(TEST_INC) -o $@ $^ $(TCMD_LIBS) $(LDLIBS) $(CHECK_LIBS)

# Small programs the suites use (tdcount; unitfilter runs a program under a
# unit file's SystemCallFilter=; corpusexport is tests/corpus/mkbusy.sh's),
# built like the tests.
TOOL_BINS   := $(O)/tests/tools/tdcount $(O)/tests/tools/tdlink $(O)/tests/tools/unitfilter \
               $(O)/tests/tools/corpusexport
$(O)/tests/tools/%: tests/tools/%.c $(TESTLIB_OBJS) $(LIBVMT)
	@mkdir -p $(dir $@)
	@echo "  TOOL    $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(TCMD_CFLAGS) -Itests/lib -o $@ $^ $(TCMD_LIBS) $(LDLIBS) $(CHECK_LIBS) $(DAEMON_LIBS)

# guestsim, the stand-in guest test_systemd_host runs in tests/systemd/vm.sh's
# machine (no compiler, no Check there): fakeguest.c in a static binary with
# no sanitizer, built like the agent.
GUESTSIM    := $(O)/tests/tools/guestsim
GUESTSIM_SRCS := tests/tools/guestsim.c tests/lib/fakeguest.c tests/lib/corpus.c $(AGENT_LIB_SRCS) lib/page.c
$(O)/agent-objs/tests/%.o: AGENT_CFLAGS += -Itests/lib
$(GUESTSIM): $(GUESTSIM_SRCS:%.c=$(O)/agent-objs/%.o)
	@mkdir -p $(dir $@)
	@echo "  LD      $@ (static)"
	$(Q)$(CC) -static $(LDFLAGS) -o $@ $^ $(shell $(PKG_CONFIG) --static --libs libtracefs 2>/dev/null) -lpthread

# The fixed corpora (real guest pages and the metadata that decodes them,
# tests/corpus/README.md), unpacked into the build folder for the tests and
# benchmarks that want a deterministic input.
CORPUS_TAR  := tests/corpus/guest-6.1.tar.zst
CORPUS      := $(O)/corpus/guest-6.1/.unpacked
$(CORPUS): $(CORPUS_TAR)
	@mkdir -p $(O)/corpus
	@echo "  UNTAR   $<"
	$(Q)rm -rf $(O)/corpus/guest-6.1 && tar --zstd -xf $< -C $(O)/corpus && touch $@
# The busy guest's (stress-ng, syscall events; tests/corpus/mkbusy.sh), the same way.
CORPUS_BUSY_TAR := tests/corpus/guest-6.1-busy.tar.zst
CORPUS_BUSY     := $(O)/corpus/guest-6.1-busy/.unpacked
$(CORPUS_BUSY): $(CORPUS_BUSY_TAR)
	@mkdir -p $(O)/corpus
	@echo "  UNTAR   $<"
	$(Q)rm -rf $(O)/corpus/guest-6.1-busy && tar --zstd -xf $< -C $(O)/corpus && touch $@
corpus: $(CORPUS) $(CORPUS_BUSY)

# The fault-injection shim test_faults preloads into vmtraced: a plain
# shared object, never sanitized (it comes ahead of the ASan runtime).
SHIM        := $(O)/tests/tools/faultshim.so
$(SHIM): tests/tools/faultshim.c
	@mkdir -p $(dir $@)
	@echo "  SHIM    $@"
	$(Q)$(CC) -O2 -g -Wall -Wextra -D_GNU_SOURCE -fPIC -shared -o $@ $< -ldl -lpthread

# test_fleet's: a js_Publish made twice (a late duplicate in the stream)
NATSSHIM    := $(O)/tests/tools/natsshim.so
$(NATSSHIM): tests/tools/natsshim.c
	@mkdir -p $(dir $@)
	@echo "  SHIM    $@"
	$(Q)$(CC) -O2 -g -Wall -Wextra -D_GNU_SOURCE -fPIC -shared -o $@ $< -ldl

tests: $(PROGS) $(UNIT_BINS) $(INTEG_BINS) $(TOOL_BINS) $(GUESTSIM) $(SHIM) $(NATSSHIM) $(CORPUS) $(CORPUS_BUSY) $(O)/tests/vmtraced-layout2

# `make check`: packages, the layering check (tools/layering.py: no include
# cycle among daemon/'s modules, no forbidden include or link), then a
# sanitizer build of everything in build/san, then every suite, then a short
# pass of every fuzz target (about 30 s).
# The summary line of run-tests.sh counts tests.
check: deps layering
	$(Q)$(MAKE) --no-print-directory O=$(O)/san SAN=1 tests
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain tests
	$(Q)VMT_BUILD=$(O)/san VMT_AGENT=$(O)/plain/vmtrace-agent tests/run-tests.sh
	$(Q)$(MAKE) --no-print-directory fuzz-check

# The same suites while stress-ng keeps every CPU and the disk busy: a test
# that depends on the machine's speed fails here. Not part of `make check`.
check-stress: deps
	$(Q)$(MAKE) --no-print-directory O=$(O)/san SAN=1 tests
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain tests
	$(Q)VMT_BUILD=$(O)/san VMT_AGENT=$(O)/plain/vmtrace-agent tests/with-stress.sh tests/run-tests.sh

check-unit check-integration check-e2e: deps
	$(Q)$(MAKE) --no-print-directory O=$(O)/san SAN=1 tests
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain tests
	$(Q)VMT_BUILD=$(O)/san VMT_AGENT=$(O)/plain/vmtrace-agent tests/run-tests.sh $(@:check-%=%)

demo: deps
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain all
	$(Q)VMT_BUILD=$(O)/plain tests/guest/demo.sh

bench: deps
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain all corpus
	$(Q)VMT_BUILD=$(O)/plain bench/run.sh

# 64 guests flooding for SOAK_SECONDS (600): RSS and fds flat, no dump lost
soak: deps
	$(Q)$(MAKE) --no-print-directory O=$(O)/plain all corpus
	$(Q)VMT_BUILD=$(O)/plain bench/run.sh soak

deps:
	$(Q)tools/deps.sh

# the design (docs/design.ini) against the sources and link lines, then the
# check itself against breaks made on a copy
layering:
	$(Q)python3 tools/layering.py
	$(Q)tools/layering-selftest.sh

# Units name the programs by their default path (PREFIX=/usr/local) on
# every Exec line (ExecStart, ExecReload, a shell's command line): the
# installed copy names where they are installed.
INSTALL_UNIT = sed -e '/^Exec/s|/usr/local/sbin/|$(SBINDIR)/|g' \
	-e '/^Exec/s|/usr/local/bin/|$(BINDIR)/|g'
CONF       := $(DESTDIR)$(SYSCONFDIR)/vmtraced/vmtraced.yaml

# A configuration already there is the administrator's: never overwritten,
# the shipped one goes beside it as vmtraced.yaml.new.
install: $(O)/vmtraced $(O)/vmtracectl
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/vmtraced \
		$(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(SYSUSERSDIR)
	install -m 755 $(O)/vmtraced $(DESTDIR)$(SBINDIR)/vmtraced
	install -m 755 $(O)/vmtracectl $(DESTDIR)$(BINDIR)/vmtracectl
	@if [ -e $(CONF) ]; then \
		echo "install -m 644 conf/vmtraced.yaml $(CONF).new"; \
		install -m 644 conf/vmtraced.yaml $(CONF).new && \
		echo "install: $(CONF) is kept; the shipped configuration is $(CONF).new"; \
	else \
		echo "install -m 644 conf/vmtraced.yaml $(CONF)"; \
		install -m 644 conf/vmtraced.yaml $(CONF); \
	fi
	install -m 644 docs/man/vmtraced.yaml.5 $(DESTDIR)$(MANDIR)/man5/
	install -m 644 docs/man/vmtraced.8 docs/man/vmtracectl.8 $(DESTDIR)$(MANDIR)/man8/
	for u in vmtraced.service vmtraced.socket vmtraced-metrics.service vmtraced-metrics.timer; do \
		$(INSTALL_UNIT) units/$$u > $(DESTDIR)$(UNITDIR)/$$u && chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -m 644 units/vmtraced.tmpfiles $(DESTDIR)$(TMPFILESDIR)/vmtraced.conf
	install -m 644 units/vmtraced.sysusers $(DESTDIR)$(SYSUSERSDIR)/vmtraced.conf
	@if [ -e $(BASH_COMPLETION) ]; then \
		echo "install -D -m 644 $(BASH_COMPLETION) $(DESTDIR)$(BASHCOMPDIR)/vmtracectl"; \
		install -D -m 644 $(BASH_COMPLETION) $(DESTDIR)$(BASHCOMPDIR)/vmtracectl; \
	fi

# The guest side, for guest images: the static agent, its unit, the udev
# rule that starts it when the control port appears, its man page.
install-agent: $(O)/vmtrace-agent
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(UDEVRULESDIR) \
		$(DESTDIR)$(MANDIR)/man8
	install -m 755 $(O)/vmtrace-agent $(DESTDIR)$(SBINDIR)/vmtrace-agent
	$(INSTALL_UNIT) units/vmtrace-agent.service > $(DESTDIR)$(UNITDIR)/vmtrace-agent.service
	chmod 644 $(DESTDIR)$(UNITDIR)/vmtrace-agent.service
	install -m 644 units/99-vmtrace-agent.rules $(DESTDIR)$(UDEVRULESDIR)/
	install -m 644 docs/man/vmtrace-agent.8 $(DESTDIR)$(MANDIR)/man8/

# What install put, but the configuration (vmtraced.yaml.new, an unedited
# copy, goes too).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/vmtraced $(DESTDIR)$(BINDIR)/vmtracectl $(CONF).new \
		$(DESTDIR)$(MANDIR)/man5/vmtraced.yaml.5 $(DESTDIR)$(MANDIR)/man8/vmtraced.8 \
		$(DESTDIR)$(MANDIR)/man8/vmtracectl.8 $(DESTDIR)$(UNITDIR)/vmtraced.service \
		$(DESTDIR)$(UNITDIR)/vmtraced.socket $(DESTDIR)$(UNITDIR)/vmtraced-metrics.service \
		$(DESTDIR)$(UNITDIR)/vmtraced-metrics.timer $(DESTDIR)$(TMPFILESDIR)/vmtraced.conf \
		$(DESTDIR)$(SYSUSERSDIR)/vmtraced.conf $(DESTDIR)$(BASHCOMPDIR)/vmtracectl
	@[ ! -e $(CONF) ] || echo "uninstall: $(CONF) is kept"

uninstall-agent:
	rm -f $(DESTDIR)$(SBINDIR)/vmtrace-agent $(DESTDIR)$(UNITDIR)/vmtrace-agent.service \
		$(DESTDIR)$(UDEVRULESDIR)/99-vmtrace-agent.rules $(DESTDIR)$(MANDIR)/man8/vmtrace-agent.8

# Debian packages (debian/): tools/mkdeb.sh builds them from a copy of the
# tree in $(O)/deb and runs lintian. DEB_VERSION=V adds a changelog entry
# for V to the copy (a newer version, for upgrade tests).
deb:
	$(Q)tools/mkdeb.sh $(O)/deb $(DEB_VERSION)

clean:
	rm -rf $(O)

.SECONDARY:

-include $(shell find $(O) -name '*.d' -type f 2>/dev/null)

# ---- BPF detectors (bpf/*.bpf.c -> skeleton -> daemon/probe.c) -----------
# Built when clang, bpftool and libbpf are there, else probe.c compiles to a
# stub that logs "built without BPF". vmlinux.h comes from the build
# machine's BTF, or from the hand-written bpf/vmlinux-min.h where there is
# none (CO-RE relocates its fields against the running kernel's BTF).
BPFTOOL     ?= $(shell command -v bpftool 2>/dev/null || echo /usr/sbin/bpftool)
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPF_ARCH    := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/' -e 's/ppc64le/powerpc/')
HAVE_BPF    ?= $(shell command -v $(CLANG) >/dev/null 2>&1 && [ -x $(BPFTOOL) ] && \
	$(PKG_CONFIG) --exists libbpf && echo 1)
ifeq ($(HAVE_BPF),1)
$(O)/daemon/probe.o $(O)/daemon/probe-maps.o: ALL_CFLAGS += -DVMT_HAVE_BPF -I$(O)/bpf
$(O)/daemon/probe.o: $(O)/bpf/detect.skel.h
# test_probe compiles daemon/probe*.c in, against a manager of its own.
$(O)/tests/test_probe: tests/integration/test_probe.c daemon/probe.c daemon/probe-maps.c \
		daemon/qemu.c bpf/detect.h lib/detectors.h $(wildcard daemon/*.h) \
		$(O)/bpf/detect.skel.h $(TESTLIB_OBJS) $(LIBVMT)
	@mkdir -p $(dir $@)
	@echo "  TEST    $@"
	$(Q)$(CC) $(ALL_CFLAGS) $(TCMD_CFLAGS) -DVMT_HAVE_BPF -I$(O)/bpf -Itests/lib -o $@ $< \
		$(TESTLIB_OBJS) $(LIBVMT) $(TCMD_LIBS) $(LDLIBS) $(BPF_LIBS) $(CHECK_LIBS)
# the daemon alone loads BPF programs: vmtracectl and the tests link no libbpf
BPF_LIBS := $(shell $(PKG_CONFIG) --libs libbpf)
endif

$(O)/bpf/vmlinux.h:
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q)if [ -r $(VMLINUX_BTF) ]; then $(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@.tmp; \
	else echo "  (no $(VMLINUX_BTF): using bpf/vmlinux-min.h)"; cp bpf/vmlinux-min.h $@.tmp; fi
	$(Q)mv $@.tmp $@
$(O)/bpf/%.bpf.o: bpf/%.bpf.c bpf/%.h lib/detectors.h $(O)/bpf/vmlinux.h
	@echo "  BPF     $<"
	$(Q)$(CLANG) -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I$(O)/bpf -Ibpf -c $< -o $@
$(O)/bpf/%.skel.h: $(O)/bpf/%.bpf.o
	@echo "  SKEL    $@"
	$(Q)$(BPFTOOL) gen skeleton $< name $*_bpf > $@.tmp && mv $@.tmp $@
include tests/fuzz/fuzz.mk
