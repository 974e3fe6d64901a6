# nn.mk - the C neural-network library (libchorus_nn), the trainer chorus-train, and their
# tests. A tier of its own over the core (`make trainer`): OpenBLAS and zlib; the trainer's
# data comes from dataset-fashion-mnist, and the GPT's text from fortunes (the demos' and the
# tests' tier).
#
#   make trainer      what make builds, plus libchorus_nn.a, libchorus_nn.so, chorus-train and
#                     chorus_nn.pc

NN_SRCS   := $(wildcard nn/*.c)
NN_OBJS   := $(NN_SRCS:%.c=$(BUILD)/obj/%.o)
NN_LIB    := $(BUILD)/lib/libchorus_nn.a
NN_SO     := $(BUILD)/lib/libchorus_nn.so
NN_LDLIBS := -lopenblas -lz

# The trainer's files (tools/train/: main.c over one file per mode, trainer.h), linked into
# chorus-train.
TRAIN_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/train/*.c))

# (the pipeline schedules are libchorus_nn's too: nn/schedule.c)
NN_TEST_SRCS := $(wildcard tests/unit/nn_*.c tests/mp/train_*.c) tests/unit/pipe_schedule.c
NN_TEST_BINS := $(NN_TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

NN_PKGS       = zlib1g-dev libopenblas-dev
DEBIAN_PKGS  += $(NN_PKGS) dataset-fashion-mnist fortunes
NN_TARGETS   := $(NN_LIB) $(NN_SO) $(BUILD)/bin/chorus-train $(BUILD)/lib/pkgconfig/chorus_nn.pc
WORLD_TARGETS += $(NN_TARGETS)
NN_PC = $(call pc_text,chorus_nn,Neural-network layers and data-parallel training over Chorus,-lchorus_nn,$(NN_LDLIBS),chorus)

.PHONY: trainer deps-nn deps-demo deps-demo-gpt demo-gpt install-nn uninstall-nn
trainer: deps-nn $(ALL_TARGETS) $(NN_TARGETS)
deps-nn:
	@sh tools/deps.sh "libchorus_nn and chorus-train (make trainer)" $(CORE_PKGS) $(NN_PKGS)
deps-demo:
	@sh tools/deps.sh "the demo (make demo)" $(CORE_PKGS) $(NN_PKGS) dataset-fashion-mnist
deps-demo-gpt:
	@sh tools/deps.sh "the GPT demo (make demo-gpt)" $(CORE_PKGS) $(NN_PKGS) fortunes
$(NN_OBJS) $(TRAIN_OBJS): | deps-nn

# The GPT's tour: the tiny preset on 2 local ranks for GPT_DEMO_SECONDS of training (the
# learning-rate schedule spans them), the gradients averaged by the engine behind backward,
# then the validation loss against the unigram model's and a sample of generated text.
GPT_DEMO_SECONDS ?= 180
demo-gpt: deps-demo-gpt $(ALL_TARGETS) $(NN_TARGETS)
	$(BUILD)/bin/chorus-run -np 2 $(BUILD)/bin/chorus-train --model gpt --grad-sync engine \
	    --time-limit $(GPT_DEMO_SECONDS) --log-every 50 --sample 600

# The layer loops are written to vectorise; -O3 lets the compiler do it fully, and
# -fno-math-errno lets it take sqrtf as one instruction (nothing here reads errno after a math
# function).
$(NN_OBJS) $(TRAIN_OBJS): OPT = -O3 -fno-math-errno

$(NN_LIB): $(NN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/chorus-train: $(TRAIN_OBJS) $(NN_LIB) $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(TRAIN_OBJS) $(NN_LIB) $(BUILD)/lib/libchorus.a $(NN_LDLIBS) $(LIB_LDLIBS)

# libchorus_nn uses only the public API of libchorus: the shared library is linked against
# libchorus.so (whose version script exports chorus_* and hides the internal chorus__*) with
# --no-undefined, so a reference to an internal symbol fails the build. Its runpath $ORIGIN
# finds libchorus.so.0 beside it, wherever the two are installed.
$(NN_SO): $(NN_OBJS) $(BUILD)/lib/libchorus.so
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--no-undefined -Wl,-soname,libchorus_nn.so.0 '-Wl,-rpath,$$ORIGIN' -o $@ $(NN_OBJS) \
	    -L$(BUILD)/lib -lchorus $(NN_LDLIBS) $(LIB_LDLIBS)
	ln -sf libchorus_nn.so $(BUILD)/lib/libchorus_nn.so.0

$(BUILD)/lib/pkgconfig/chorus_nn.pc: Makefile $(wildcard mk/*.mk) include/chorus.h
	@mkdir -p $(dir $@)
	printf '$(NN_PC)' > $@

# make install puts the trainer's tier next to the core (include/chorus/nn.h is installed
# with the other headers; the headers it includes, include/chorus/nn/*.h, here).
install: install-nn
install-nn: all $(NN_TARGETS)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(INCLUDEDIR)/chorus/nn
	install -m 644 $(wildcard include/chorus/nn/*.h) $(DESTDIR)$(INCLUDEDIR)/chorus/nn/
	install -m 644 $(NN_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(NN_SO) $(DESTDIR)$(LIBDIR)/libchorus_nn.so.$(VERSION)
	ln -sf libchorus_nn.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libchorus_nn.so.0
	ln -sf libchorus_nn.so.0 $(DESTDIR)$(LIBDIR)/libchorus_nn.so
	install -m 755 $(BUILD)/bin/chorus-train $(DESTDIR)$(BINDIR)/
	printf '$(NN_PC)' > $(DESTDIR)$(PKGCONFIGDIR)/chorus_nn.pc

uninstall: uninstall-nn
uninstall-nn:
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,libchorus_nn.a libchorus_nn.so libchorus_nn.so.0 libchorus_nn.so.$(VERSION))
	rm -f $(DESTDIR)$(BINDIR)/chorus-train $(DESTDIR)$(PKGCONFIGDIR)/chorus_nn.pc
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(patsubst include/%,%,$(wildcard include/chorus/nn/*.h)))
	rmdir $(DESTDIR)$(INCLUDEDIR)/chorus/nn 2>/dev/null || true

# The trainer linked against the two shared libraries, found next to it through its rpath
# (libchorus.so.0 is libchorus.so's soname), for the nn_shared test.
$(BUILD)/tests/nn/chorus-train-shared: $(TRAIN_OBJS) $(NN_SO) $(BUILD)/lib/libchorus.so
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -Wl,-rpath,'$$ORIGIN/../../lib' -o $@ $(TRAIN_OBJS) -L$(BUILD)/lib -lchorus_nn -lchorus \
	    $(NN_LDLIBS) $(LIB_LDLIBS)
TEST_BINS += $(BUILD)/tests/nn/chorus-train-shared

# nn tests use the shared harness (tests/harness.h) and link the nn library, BLAS and zlib.
$(NN_TEST_BINS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/harness.o $(NN_LIB) \
                 $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(BUILD)/obj/tests/harness.o $(NN_LIB) $(BUILD)/lib/libchorus.a \
	    $(NN_LDLIBS) $(LIB_LDLIBS)

.PHONY: nn
nn: $(NN_LIB) $(NN_SO) $(BUILD)/bin/chorus-train $(NN_TEST_BINS) $(BUILD)/tests/nn/chorus-train-shared
