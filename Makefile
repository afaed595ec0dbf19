# reprise — build, test, run.
#
#   make            build build/libreprise.a and build/reprise (release, -O2 -g)
#   make run        set up what is missing, build, run the demo job
#   make test       build release + sanitizer trees, run the whole suite in both
#   make san        build the ASan+UBSan tree (build-san/)
#   make fuzz       build the libFuzzer targets (clang) and run each for FUZZ_SECONDS
#   make soak       64 clients x 1000 mixed requests against serve --parallel 4 (long;
#                   SAN=1: the ASan+UBSan+LSan tree)
#   make format     clang-format every C source in place
#   make bench      run the benchmark scripts under bench/ (long)
#   make install    PREFIX=/usr/local DESTDIR= (scripts/packaging.mk); make uninstall
#
# BUILD=dir picks the output tree, so several trees can coexist.

BUILD    ?= build
CC       ?= cc
SHARED   ?= $(if $(REPRISE_SHARED),$(REPRISE_SHARED),../shared)
export REPRISE_SHARED := $(abspath $(SHARED))

WARN     := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Werror
OPT      ?= -O2 -g
CPPFLAGS += -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP
PKGS     := libpcre2-8 libmicrohttpd jansson libxxhash libpng libedit
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS   += $(WARN) $(OPT) -pthread -fno-strict-aliasing $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   += $(PKG_LIBS) -lm -pthread

ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer -DRP_SANITIZE=1
LDFLAGS  += -fsanitize=address,undefined
endif

# Kernels compiled for an instruction set beyond the baseline; chosen at run
# time from cpuid (src/base/cpu.c), so the binary still runs where they are absent
# (files named *_avx512_bf16.c add AVX512_BF16, which cpu.c checks on its own).
ISA_avx2   := -mavx2 -mfma -mf16c -mbmi2
ISA_avx512 := $(ISA_avx2) -mavx512f -mavx512bw -mavx512vl -mavx512dq \
              -mavx512vnni -mavx512vbmi

LIB_SRC  := $(sort $(wildcard src/*/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

# `make` with no goal builds `all`, whatever the included files define first.
.DEFAULT_GOAL := all

# Vulkan backend (issue 23): adds its objects to LIB_OBJ when libvulkan-dev and
# glslc are installed; sets VK_FORMAT (its sources, for make format).
include src/backend/vulkan/vulkan.mk

LIB      := $(BUILD)/libreprise.a
BIN      := $(BUILD)/reprise
TESTBIN  := $(BUILD)/test-unit

.PHONY: all run test san fuzz soak format format-check bench setup clean unit FORCE
all: $(LIB) $(BIN) $(TESTBIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(if $(findstring _avx512,$<),$(ISA_avx512),$(if $(findstring _avx2,$<),$(ISA_avx2))) $(if $(findstring _avx512_bf16,$<),-mavx512bf16) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(TOOL_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(TOOL_OBJ) $(LIB) $(LDLIBS)

# The list of unit tests is every `void test_NAME(void)` defined in tests/unit,
# in file order: adding a test is writing the function.
# (Regenerated on every build, replaced only when it changes, so deleting a
# test file also drops its tests.)
$(BUILD)/tests/list.h: FORCE
	@mkdir -p $(dir $@)
	@sed -n 's/^void test_\([A-Za-z0-9_]*\)(void) {.*/T(\1)/p' $(TEST_SRC) > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
FORCE:

$(TEST_OBJ): CPPFLAGS += -I$(BUILD)/tests
$(TEST_OBJ): $(BUILD)/tests/list.h

$(TESTBIN): $(TEST_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(LIB) $(LDLIBS)

# The demo model and text are assembled into the binary (tools/demo_data.c).
$(BUILD)/tools/demo_data.o: models/demo-llama.gguf models/war-and-peace-heldout.txt
# The server's chat page likewise (tools/serve_page.c).
$(BUILD)/tools/serve_page.o: tools/web/chat.html

san:
	$(MAKE) BUILD=build-san SAN=1 OPT="-O1 -g" all

setup:
	@scripts/setup.sh

run: setup
	@$(MAKE) --no-print-directory all
	@$(BIN) demo

# the sanitizer tree builds on every core (2 min serial on the 2-core machine)
NPROC    := $(shell nproc 2> /dev/null || echo 2)
test: all
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=build-san SAN=1 OPT="-O1 -g" all
	@tests/run.sh $(BUILD) build-san

unit: all
	@$(TESTBIN)

fuzz:
	@tests/fuzz/run.sh

# make soak SAN=1: the ASan+UBSan tree (build-san), leaks checked at the server's exit
soak: $(if $(filter 1,$(SAN)),san,all)
	@BUILD=$(if $(filter 1,$(SAN)),build-san,$(BUILD)) tests/soak/soak.sh

bench: all
	@for s in bench/*.sh; do echo "== $$s"; $$s || exit 1; done

# every C source and header: what `make format` rewrites is what format-check checks
FORMAT_SRC = $(LIB_SRC) $(VK_FORMAT) $(TOOL_SRC) $(TEST_SRC) \
             $(wildcard include/*.h src/*.h src/*/*.h tools/*.h tests/*.h tests/unit/*.h tests/fuzz/*.c)

format:
	clang-format -i $(FORMAT_SRC)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_SRC)

clean:
	rm -rf build build-san build-fuzz

include scripts/packaging.mk

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d)
