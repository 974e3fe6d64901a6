# nn.mk - the C neural-network library (libchorus_nn), the trainer chorus-train, and their
# tests. Needs OpenBLAS and zlib; the trainer's data comes from dataset-fashion-mnist.

NN_SRCS   := $(wildcard nn/*.c)
NN_OBJS   := $(NN_SRCS:%.c=$(BUILD)/obj/%.o)
NN_LIB    := $(BUILD)/lib/libchorus_nn.a
NN_LDLIBS := -lopenblas -lz

NN_TEST_SRCS := $(wildcard tests/unit/nn_*.c tests/mp/train_*.c)
NN_TEST_BINS := $(NN_TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

DEBIAN_PKGS += zlib1g-dev libopenblas-dev dataset-fashion-mnist
TOOL_SRCS   += tools/chorus-train.c
ALL_TARGETS += $(NN_LIB) $(BUILD)/bin/chorus-train

# The layer loops are written to vectorise; -O3 lets the compiler do it fully.
$(NN_OBJS) $(BUILD)/obj/tools/chorus-train.o: OPT = -O3

$(NN_LIB): $(NN_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/chorus-train: $(BUILD)/obj/tools/chorus-train.o $(NN_LIB) $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(NN_LIB) $(BUILD)/lib/libchorus.a $(NN_LDLIBS) $(LIB_LDLIBS)

# nn tests carry their own small assertion macros (nn/nn_test.h), so they do not need the
# shared harness; they link the nn library, BLAS and zlib.
$(NN_TEST_BINS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(NN_LIB) $(BUILD)/lib/libchorus.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(NN_LIB) $(BUILD)/lib/libchorus.a $(NN_LDLIBS) $(LIB_LDLIBS)

.PHONY: nn
nn: $(NN_LIB) $(BUILD)/bin/chorus-train $(NN_TEST_BINS)
