# libFuzzer targets for the parsers of untrusted and persisted input
# (tests/fuzz/README.md). Included by the top Makefile; uses its O, Q,
# CLANG, BASE_CFLAGS, PKG_CFLAGS, PKG_LIBS, TCMD_CFLAGS and LIB_SRCS.
#
#   make fuzz [FUZZ_TIME=60]   build, then fuzz every target FUZZ_TIME seconds
#   make fuzz-check            seeds + regression inputs + a short fuzz (~30 s)
#   make fuzz-seeds            rebuild tests/fuzz/corpus/ from real captures
#
# Everything goes to $(O)/fuzz/: lib objects built again with clang and
# -fsanitize=fuzzer-no-link,address,undefined, the targets, logs, scratch
# corpora and artifacts.

FUZZ_TARGETS    := proto page meta ctlproto sample aux config decode tcode tframe fleetreq
FUZZ_DIR        := $(O)/fuzz
FUZZ_CC         ?= $(CLANG)
FUZZ_TIME       ?= 60
FUZZ_CHECK_TIME ?= 3
FUZZ_CORPUS_SRC ?= $(or $(VMT_CORPUS),$(abspath ../shared/corpus/guest-6.1))
# SANFLAGS is the top Makefile's SAN=1 set, which BASE_CFLAGS may carry:
# the fuzz build has its own.
FUZZ_SAN        := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
FUZZ_CFLAGS     := $(filter-out $(SANFLAGS),$(BASE_CFLAGS)) $(PKG_CFLAGS) $(TCMD_CFLAGS) \
	-g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link
# All of lib/, archived, so that a target links what it reaches and no
# more; FUZZ_LIB_SRCS="lib/a.c ..." narrows it (a module mid-change).
FUZZ_LIB_SRCS   ?= $(LIB_SRCS)
FUZZ_LIB_OBJS   := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_LIB        := $(FUZZ_DIR)/libvmt-fuzz.a
FUZZ_BINS       := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_RUN        := tests/fuzz/run.sh
# the makefile make was started with, for the recursive build
FUZZ_TOP        := $(firstword $(MAKEFILE_LIST))

.PHONY: fuzz fuzz-build fuzz-check fuzz-seeds

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (fuzz)"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<

$(FUZZ_LIB): $(FUZZ_LIB_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lpthread

# the report decoder lives in ctl/, beside the library
$(FUZZ_DIR)/obj/tests/fuzz/fuzz_decode.o $(FUZZ_DIR)/obj/ctl/decode.o: FUZZ_CFLAGS += -Ictl
$(FUZZ_DIR)/fuzz_decode: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_decode.o $(FUZZ_DIR)/obj/ctl/decode.o \
		$(FUZZ_LIB)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lpthread

# the fleet's request checks are the daemon's own pure files
FUZZ_FLEET_OBJS := $(FUZZ_DIR)/obj/daemon/fleet-json.o $(FUZZ_DIR)/obj/daemon/fleet-reply.o
$(FUZZ_DIR)/obj/tests/fuzz/fuzz_fleetreq.o $(FUZZ_FLEET_OBJS): FUZZ_CFLAGS += -Idaemon
$(FUZZ_DIR)/fuzz_fleetreq: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_fleetreq.o $(FUZZ_FLEET_OBJS) $(FUZZ_LIB)
	@echo "  FUZZ    $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) -lpthread

fuzz-build: $(FUZZ_BINS)

fuzz:
	$(Q)$(FUZZ_RUN) probe "$(FUZZ_CC)" || exit 1
	$(Q)$(MAKE) --no-print-directory -f $(FUZZ_TOP) fuzz-build
	$(Q)$(FUZZ_RUN) fuzz "$(FUZZ_DIR)" "$(FUZZ_TIME)" $(FUZZ_TARGETS)

fuzz-check:
	$(Q)$(FUZZ_RUN) probe "$(FUZZ_CC)" || exit 0; \
	$(MAKE) --no-print-directory -f $(FUZZ_TOP) fuzz-build && \
	$(FUZZ_RUN) check "$(FUZZ_DIR)" "$(FUZZ_CHECK_TIME)" $(FUZZ_TARGETS)

# The seed generator: the same instrumented objects, with the tests' corpus
# loader; the config seeds are copies of shipped and golden-test YAML.
FUZZ_SEED_CONFIGS := conf/vmtraced.yaml $(addprefix tests/config/,full.yaml anchors.yaml \
	detectors.yaml durations.yaml sizes.yaml control-groups.yaml blocks-null.yaml \
	alias-loop.yaml deep-nesting.yaml bad-utf8.yaml)
$(FUZZ_DIR)/mkseeds: $(FUZZ_DIR)/obj/tests/fuzz/mkseeds.o $(FUZZ_DIR)/obj/tests/lib/corpus.o \
		$(FUZZ_LIB)
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^ $(PKG_LIBS) $(TCMD_LIBS) -lpthread
$(FUZZ_DIR)/obj/tests/fuzz/mkseeds.o $(FUZZ_DIR)/obj/tests/lib/corpus.o: FUZZ_CFLAGS += -Itests/lib

fuzz-seeds: $(FUZZ_DIR)/mkseeds
	@echo "  SEEDS   tests/fuzz/corpus from $(FUZZ_CORPUS_SRC)"
	$(Q)for t in proto page meta ctlproto sample aux; do rm -rf tests/fuzz/corpus/$$t; done
	$(Q)$(FUZZ_DIR)/mkseeds $(FUZZ_CORPUS_SRC) tests/fuzz/corpus
	$(Q)rm -rf tests/fuzz/corpus/config && mkdir -p tests/fuzz/corpus/config
	$(Q)for f in $(FUZZ_SEED_CONFIGS); do \
		cp $$f tests/fuzz/corpus/config/$$(echo $$f | tr / -); done
