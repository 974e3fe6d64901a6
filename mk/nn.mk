# nn.mk - the C neural-network library (libchorus_nn), the trainer chorus-train, and their
# tests. Needs OpenBLAS and zlib; the trainer's data comes from dataset-fashion-mnist.

NN_SRCS   := $(wildcard nn/*.c)
NN_OBJS   := $(NN_SRCS:%.c=$(BUILD)/obj/%.o)
NN_LIB    := $(BUILD)/lib/libchorus_nn.a
NN_SO     := $(BUILD)/lib/libchorus_nn.so
NN_LDLIBS := -lopenblas -lz

NN_TEST_SRCS := $(wildcard tests/unit/nn_*.c tests/mp/train_*.c)
NN_TEST_BINS := $(NN_TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

DEBIAN_PKGS += zlib1g-dev libopenblas-dev dataset-fashion-mnist
TOOL_SRCS   += tools/chorus-train.c
ALL_TARGETS += $(NN_LIB) $(NN_SO) $(BUILD)/bin/chorus-train

# The layer loops are written to vectorise; -O3 lets the compiler do it fully.
$(NN_OBJS) $(BUILD)/obj/tools/chorus-train.o: OPT = -O3

$(NN_LIB): $(NN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/chorus-train: $(BUILD)/obj/tools/chorus-train.o $(NN_LIB) $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(NN_LIB) $(BUILD)/lib/libchorus.a $(NN_LDLIBS) $(LIB_LDLIBS)

# libchorus_nn uses only the public API of libchorus: the shared library is linked against
# libchorus.so (whose version script exports chorus_* and hides the internal chorus__*) with
# --no-undefined, so a reference to an internal symbol fails the build.
$(NN_SO): $(NN_OBJS) $(BUILD)/lib/libchorus.so
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--no-undefined -o $@ $(NN_OBJS) \
	    -L$(BUILD)/lib -lchorus $(NN_LDLIBS) $(LIB_LDLIBS)

# The trainer linked against the two shared libraries, found next to it through its rpath
# (libchorus.so.0 is libchorus.so's soname), for the nn_shared test.
$(BUILD)/tests/nn/chorus-train-shared: $(BUILD)/obj/tools/chorus-train.o $(NN_SO) $(BUILD)/lib/libchorus.so
	@mkdir -p $(dir $@)
	ln -sf libchorus.so $(BUILD)/lib/libchorus.so.0
	$(CC) $(LDFLAGS) -Wl,-rpath,'$$ORIGIN/../../lib' -o $@ $< -L$(BUILD)/lib -lchorus_nn -lchorus \
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
