# fuzz.mk - libFuzzer targets (tests/fuzz/fuzz_*.c) for every parser of bytes from outside:
# wire headers and payloads, the authentication handshake, the store server's request
# handling, the engine's negotiation messages, checkpoint headers, the trainer's checkpoint
# payload and its IDX reader. Built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer into build-fuzz/.
#
#   make fuzz                      build the targets
#   make fuzz-ci                   run each for FUZZ_SECONDS (default 20) from its seed corpus
#   make fuzz-ci FUZZ_SECONDS=60   what docs/SECURITY.md reports
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_SECONDS ?= 20
FUZZ_CFLAGS  := -std=c11 -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -Iinclude -Isrc -pthread \
                -fsanitize=address,undefined -fno-sanitize-recover=all
# the whole library: the parsers of outside bytes live in base/, wire/ and bootstrap/, but the
# trainer's layers (checkpoint payload, IDX reader) pull in collectives through the model code;
# archives pull only the objects a target needs
FUZZ_LIB_SRCS := $(LIB_SRCS)
FUZZ_NN_SRCS  := $(wildcard nn/*.c)
FUZZ_LIB_OBJS := $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_NN_OBJS  := $(FUZZ_NN_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
# the IDX and checkpoint-payload targets only when the trainer's library is there
FUZZ_SRCS := $(filter-out $(if $(FUZZ_NN_SRCS),,tests/fuzz/fuzz_idx.c tests/fuzz/fuzz_nn_ckpt.c),$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(FUZZ_BUILD)/%)

FUZZ_PKGS    = clang $(CORE_PKGS) $(NN_PKGS)
DEBIAN_PKGS += clang

.PHONY: fuzz fuzz-ci deps-fuzz
fuzz: $(FUZZ_BINS)
deps-fuzz:
	@sh tools/deps.sh "the fuzz targets (make fuzz)" $(FUZZ_PKGS)

$(FUZZ_BUILD)/obj/%.o: %.c | deps-fuzz
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/libchorus-fuzz.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/libchorus_nn-fuzz.a: $(FUZZ_NN_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_idx: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_idx.o $(FUZZ_BUILD)/libchorus_nn-fuzz.a $(FUZZ_BUILD)/libchorus-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lopenblas -lz $(LIB_LDLIBS)

$(FUZZ_BUILD)/fuzz_nn_ckpt: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_nn_ckpt.o $(FUZZ_BUILD)/libchorus_nn-fuzz.a $(FUZZ_BUILD)/libchorus-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lopenblas -lz $(LIB_LDLIBS)

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libchorus-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LIB_LDLIBS)

# Each target from its checked-in seeds (tests/fuzz/seeds/<target>/) plus what it finds,
# kept in build-fuzz/corpus/; a crash leaves its input in build-fuzz/ and fails the run.
fuzz-ci: $(FUZZ_BINS)
	@set -e; for f in $(FUZZ_BINS); do \
	    t=$$(basename $$f); mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	    seeds=tests/fuzz/seeds/$$t; [ -d $$seeds ] || seeds=; \
	    echo "== $$t for $(FUZZ_SECONDS)s"; \
	    ASAN_OPTIONS=detect_leaks=1 $$f -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	        -use_value_profile=1 -artifact_prefix=$(FUZZ_BUILD)/$$t- -print_final_stats=1 \
	        $(FUZZ_BUILD)/corpus/$$t $$seeds 2>&1 | grep -E "^(#[0-9]+ *DONE|Done|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)" ; \
	    [ -z "$$(ls $(FUZZ_BUILD)/$$t-crash-* $(FUZZ_BUILD)/$$t-leak-* $(FUZZ_BUILD)/$$t-timeout-* 2>/dev/null)" ] || { echo "$$t: FOUND A CRASH"; exit 1; }; \
	done; echo "fuzz-ci: every target ran $(FUZZ_SECONDS)s without a finding"
