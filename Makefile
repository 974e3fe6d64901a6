# Chorus build. Plain GNU make; every component adds itself through a fragment in mk/*.mk.
#
#   make                 library + tools          make test      build and run every test
#   make demo            train on 2 local ranks   make install PREFIX=dir
#   make SANITIZE=address,undefined   (or thread) builds into build-<sanitizer>/

PREFIX   ?= /usr/local
CC       ?= cc
SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD    ?= build
SANFLAGS :=
else
BUILD    ?= build-$(subst $(comma),-,$(SANITIZE))
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
comma := ,

OPT      ?= -O2
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -Werror -fPIC -pthread $(SANFLAGS)
LDFLAGS  += -pthread $(SANFLAGS)
LIB_LDLIBS  = -lrt -lm

# Debian packages needed to build and test; fragments append to this.
DEBIAN_PKGS = gcc make libc6-dev pkg-config openmpi-bin libopenmpi-dev

LIB_SRCS := $(wildcard src/*/*.c src/transport/*/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)

# Tools: tools/<name>.c -> $(BUILD)/bin/<name>; fragments may add their own rules.
TOOL_SRCS ?= tools/chorus-run.c tools/chorus-bench.c
TOOLS      = $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%)

# Tests: tests/unit/*.c and tests/mp/*.c each become a program linked with libchorus.a.
TEST_SRCS := $(wildcard tests/unit/*.c tests/mp/*.c tests/fault/*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

ALL_TARGETS = $(BUILD)/lib/libchorus.a $(BUILD)/lib/libchorus.so $(TOOLS) $(BUILD)/lib/pkgconfig/chorus.pc

.DEFAULT_GOAL := all
include $(sort $(wildcard mk/*.mk))

.PHONY: all deps test demo install clean format format-check check-structure
.SECONDARY:
all: deps $(ALL_TARGETS)

deps:
	@sh tools/deps.sh $(DEBIAN_PKGS)

# Order-only on deps: with -j the compilers must not start before missing headers are installed.
$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -c $< -o $@

$(BUILD)/lib/libchorus.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/lib/libchorus.so: $(LIB_OBJS) src/chorus.map
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/chorus.map -Wl,-soname,libchorus.so.0 \
	    -o $@ $(LIB_OBJS) $(LIB_LDLIBS)

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/lib/libchorus.a $(LIB_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/harness.o $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/obj/tests/harness.o $(BUILD)/lib/libchorus.a $(LIB_LDLIBS)

$(BUILD)/lib/pkgconfig/chorus.pc: Makefile $(wildcard mk/*.mk)
	@mkdir -p $(dir $@)
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: chorus\nDescription: Distributed deep-learning collectives and training runtime\nVersion: 0.1.0\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lchorus\nLibs.private: $(LIB_LDLIBS) -pthread\nCflags: -I$${includedir}\n' '$(PREFIX)' > $@

test: deps $(ALL_TARGETS) $(TEST_BINS)
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) sh tests/run.sh $(TESTS)

demo: deps $(ALL_TARGETS)
	@BUILD=$(BUILD) sh tools/demo.sh

install: all
	@rm -f $(BUILD)/lib/pkgconfig/chorus.pc && $(MAKE) --no-print-directory $(BUILD)/lib/pkgconfig/chorus.pc PREFIX=$(PREFIX)
	install -d $(PREFIX)/lib/pkgconfig $(PREFIX)/include/chorus $(PREFIX)/bin
	install -m 644 $(BUILD)/lib/libchorus.a $(PREFIX)/lib/
	install -m 755 $(BUILD)/lib/libchorus.so $(PREFIX)/lib/libchorus.so.0
	ln -sf libchorus.so.0 $(PREFIX)/lib/libchorus.so
	install -m 644 include/chorus.h $(PREFIX)/include/
	for h in include/chorus/*.h; do [ -f "$$h" ] && install -m 644 $$h $(PREFIX)/include/chorus/; done; true
	install -m 755 $(TOOLS) $(PREFIX)/bin/
	install -m 644 $(BUILD)/lib/pkgconfig/chorus.pc $(PREFIX)/lib/pkgconfig/

# Structure rules (no include, call or import cycles; no upward calls; contract comments;
# getenv only in the config module): tools/check_structure.py says what each rule is.
check-structure: $(LIB_OBJS)
	python3 tools/check_structure.py $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
