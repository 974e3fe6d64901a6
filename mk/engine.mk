# engine.mk - the training runtime (src/engine/, include/chorus/engine.h): its benchmark and
# a ThreadSanitizer run of its tests. The library sources and the tests (tests/unit/engine_*,
# tests/mp/engine_*) are picked up by the top-level Makefile's wildcards; the tests are listed
# in tests/list/engine.list (names start with engine_).

ENGINE_TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/engine_*.c tests/mp/engine_*.c))

$(BUILD)/bin/engine_step: $(BUILD)/obj/bench/engine_step.o $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/lib/libchorus.a $(LIB_LDLIBS)

.PHONY: engine engine-bench engine-tsan
engine: $(BUILD)/lib/libchorus.a $(BUILD)/bin/chorus-run $(ENGINE_TEST_BINS) $(BUILD)/bin/engine_step

engine-bench: engine
	BUILD=$(BUILD) sh bench/engine_step.sh

# The engine's tests built with -fsanitize=thread into build-thread/ and run from there.
engine-tsan:
	$(MAKE) --no-print-directory SANITIZE=thread engine
	BUILD=build-thread bash tests/run.sh engine_
