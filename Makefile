# Chorus build. Plain GNU make; every component adds itself through a fragment in mk/*.mk.
#
#   make                 library + chorus-run, chorus-bench (needs a C compiler and libsodium)
#   make trainer         libchorus_nn + chorus-train (adds OpenBLAS and zlib)
#   make test            build and run every test   make demo   train on 2 local ranks
#   make test-under-load [ROUNDS=3] [LOAD=N]   make test beside N busy loops (default nproc)
#   make install [PREFIX=/usr/local] [DESTDIR=stage]     make uninstall (same variables)
#   make SANITIZE=address,undefined   (or thread) builds into build-<sanitizer>/
#   make images          the container images chorus and chorus-torch (podman; mk/containers.mk)
#   make container-test  images, then the Kubernetes job in containers (minutes; not in make test)
#
# Each target checks the Debian packages of its own tier (tools/deps.sh): as root it installs
# the missing ones, otherwise it names them and the apt-get command. CHORUS_SKIP_DEPS=1 skips
# the check (another distribution, or packages installed some other way).

PREFIX   ?= /usr/local
DESTDIR  ?=
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# "0.1.0", from the CHORUS_VERSION_* macros of include/chorus.h (the one place it is written)
VERSION  := $(shell awk '/define CHORUS_VERSION_(MAJOR|MINOR|PATCH) /{v = v s $$3; s = "."} END{print v}' include/chorus.h)
CC       ?= cc
SANITIZE ?=
# Tests run this many at a time (tests/run.sh; a list file that starts "#@ alone" runs alone).
TEST_JOBS ?= 2
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

# Debian packages, by tier. CORE_PKGS build the library and its tools (plain `make`);
# fragments add theirs (mk/security.mk: libsodium). DEBIAN_PKGS is everything `make test`
# needs: the tiers of every fragment plus the test tools; fragments append to it.
CORE_PKGS   = gcc make libc6-dev
DEBIAN_PKGS = $(CORE_PKGS) pkg-config openmpi-bin libopenmpi-dev

LIB_SRCS := $(wildcard src/*/*.c src/transport/*/*.c src/engine/compress/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)

# Tools: tools/<name>.c -> $(BUILD)/bin/<name>; fragments may add their own rules. The
# launcher's code is library code (src/launch/); tools/chorus-run.c is its main.
TOOL_SRCS ?= tools/chorus-run.c tools/chorus-bench.c
TOOLS      = $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%)

# Tests: tests/unit/*.c and tests/mp/*.c each become a program linked with libchorus.a.
TEST_SRCS := $(wildcard tests/unit/*.c tests/mp/*.c tests/fault/*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

# What plain `make` builds; WORLD_TARGETS adds the other tiers (fragments append), built by
# `make test`, `make demo` and `make install`.
ALL_TARGETS = $(BUILD)/lib/libchorus.a $(BUILD)/lib/libchorus.so $(TOOLS) $(BUILD)/lib/pkgconfig/chorus.pc
WORLD_TARGETS = $(ALL_TARGETS)

.DEFAULT_GOAL := all
include $(sort $(wildcard mk/*.mk))

.PHONY: all deps deps-core deps-format test test-under-load demo install uninstall clean format format-check check-structure
.SECONDARY:
all: deps-core $(ALL_TARGETS)

deps-core:
	@sh tools/deps.sh "the library and its tools (make)" $(CORE_PKGS)
deps:
	@sh tools/deps.sh "the tests (make test)" $(DEBIAN_PKGS)
deps-format:
	@sh tools/deps.sh "clang-format (make format, make format-check)" clang-format

# Order-only on deps: with -j the compilers must not start before missing headers are installed.
$(BUILD)/obj/%.o: %.c | deps-core
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -c $< -o $@

$(BUILD)/lib/libchorus.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/lib/libchorus.so: $(LIB_OBJS) src/chorus.map
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/chorus.map -Wl,-soname,libchorus.so.0 \
	    -o $@ $(LIB_OBJS) $(LIB_LDLIBS)
	ln -sf libchorus.so $(BUILD)/lib/libchorus.so.0

# Test programs compile after the test tier's packages are there.
$(TEST_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/harness.o: | deps

$(BUILD)/bin/%: $(BUILD)/obj/tools/%.o $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/lib/libchorus.a $(LIB_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/harness.o $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/obj/tests/harness.o $(BUILD)/lib/libchorus.a $(LIB_LDLIBS)

# pkg-config text of a library installed under PREFIX: $(call pc_text,name,description,
# -l flags,private libraries,Requires). Outside the system directory (/usr) Libs carries an
# rpath, so a program built from it runs without LD_LIBRARY_PATH.
pc_text = prefix=$(PREFIX)\nlibdir=$(LIBDIR)\nincludedir=$(INCLUDEDIR)\n\nName: $(1)\nDescription: $(2)\nVersion: $(VERSION)\n$(if $(5),Requires: $(5)\n)Libs: -L$${libdir} $(if $(filter /usr,$(PREFIX)),,-Wl,-rpath,$${libdir} )$(3)\nLibs.private: $(4)\nCflags: -I$${includedir}\n
CHORUS_PC = $(call pc_text,chorus,Distributed deep-learning collectives and training runtime,-lchorus,$(LIB_LDLIBS) -pthread,)

$(BUILD)/lib/pkgconfig/chorus.pc: Makefile $(wildcard mk/*.mk) include/chorus.h
	@mkdir -p $(dir $@)
	printf '$(CHORUS_PC)' > $@

test: deps $(WORLD_TARGETS) $(TEST_BINS)
	@BUILD=$(BUILD) SANITIZE=$(SANITIZE) CHORUS_TEST_JOBS=$${CHORUS_TEST_JOBS:-$(TEST_JOBS)} \
	    bash tests/run.sh $(TESTS)

# make test while busy loops (LOAD, default one per core) keep the machine loaded, ROUNDS
# times (default 1): tests must hold on a machine busy with other work (tools/test_under_load.sh).
test-under-load:
	@BUILD=$(BUILD) MAKE="$(MAKE)" sh tools/test_under_load.sh

demo: deps-demo $(WORLD_TARGETS)
	@BUILD=$(BUILD) sh tools/demo.sh

# Installs under $(DESTDIR)$(PREFIX): the libraries (static, and shared with its soname
# link), the headers, the tools and the pkg-config files; fragments add theirs (the trainer's
# library, man pages) as prerequisites of install and uninstall. The pkg-config files are
# written for PREFIX (what the files' final place is), not for DESTDIR.
install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(INCLUDEDIR)/chorus $(DESTDIR)$(BINDIR)
	install -m 644 $(BUILD)/lib/libchorus.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/lib/libchorus.so $(DESTDIR)$(LIBDIR)/libchorus.so.$(VERSION)
	ln -sf libchorus.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libchorus.so.0
	ln -sf libchorus.so.0 $(DESTDIR)$(LIBDIR)/libchorus.so
	install -m 644 include/chorus.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(wildcard include/chorus/*.h) $(DESTDIR)$(INCLUDEDIR)/chorus/
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)/
	printf '$(CHORUS_PC)' > $(DESTDIR)$(PKGCONFIGDIR)/chorus.pc

# Removes what install put there, file by file, and the include/chorus directory when empty.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libchorus.a libchorus.so libchorus.so.0 libchorus.so.$(VERSION))
	rm -f $(DESTDIR)$(INCLUDEDIR)/chorus.h $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(patsubst include/%,%,$(wildcard include/chorus/*.h)))
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS))) $(DESTDIR)$(PKGCONFIGDIR)/chorus.pc
	rmdir $(DESTDIR)$(INCLUDEDIR)/chorus 2>/dev/null || true

# Structure rules (no include, call or import cycles; no upward calls; contract comments;
# getenv only in the config module): tools/check_structure.py says what each rule is.
# The structure rules need every object of src/, nn/ and tools/ (the trainer's tier too);
# check_circles.py finds the circles again from gcc -MM and readelf.
check-structure: $(ALL_TARGETS) $(NN_TARGETS)
	python3 tools/check_structure.py $(BUILD)
	python3 tools/check_circles.py $(BUILD)

format: deps-format
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cpp')

format-check: deps-format
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cpp')

clean:
	rm -rf build build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
