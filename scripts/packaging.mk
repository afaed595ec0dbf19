# The shared library, pkg-config file, man page, make install / uninstall
# (issue 28), included by the Makefile.
#
#   $(BUILD)/libreprise.so.$(SOVER)   soname libreprise.so.$(SOVER), the public API
#                                     only (reprise.h and reprise_tools.h declare
#                                     it between RP_API_BEGIN / RP_API_END; every
#                                     other symbol is hidden)
#   make install PREFIX=/usr/local DESTDIR=   bin/reprise, lib/libreprise.{so*,a},
#                                     include/reprise*.h, lib/pkgconfig/reprise.pc,
#                                     share/man/man1/reprise.1 (from the --help texts)
#   make uninstall PREFIX=… DESTDIR=…  removes exactly those
#
# The library objects are compiled -fPIC -fvisibility=hidden in every tree (the
# static library links as before). In a sanitizer tree the .so carries ASan and
# UBSan: its reprise.pc adds the -fsanitize flags a program linking it needs.

VERSION  := $(shell sed -n 's/^\#define RP_VERSION "\(.*\)"/\1/p' include/reprise.h)
SOVER    := 0
SONAME   := libreprise.so.$(SOVER)
SO       := $(BUILD)/libreprise.so
PREFIX   ?= /usr/local
DESTDIR  ?=
comma    := ,
PC_SAN   := $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined)

$(LIB_OBJ): CFLAGS += -fPIC -fvisibility=hidden
# objects compiled before these flags existed are compiled again (once)
$(LIB_OBJ): $(BUILD)/.fpic
$(BUILD)/.fpic:
	@mkdir -p $(dir $@) && touch $@
all: $(SO)

$(SO): $(LIB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@.$(VERSION) $^ $(LDLIBS)
	ln -sf libreprise.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf libreprise.so.$(VERSION) $@

$(BUILD)/reprise.1: $(BIN) scripts/manpage.sh
	scripts/manpage.sh $(BIN) > $@.tmp && mv $@.tmp $@

I_BIN := $(DESTDIR)$(PREFIX)/bin
I_LIB := $(DESTDIR)$(PREFIX)/lib
I_INC := $(DESTDIR)$(PREFIX)/include
I_MAN := $(DESTDIR)$(PREFIX)/share/man/man1

.PHONY: install uninstall
# reprise.pc records PREFIX: written here, for this one
install: all $(BUILD)/reprise.1
	install -d $(I_BIN) $(I_LIB)/pkgconfig $(I_INC) $(I_MAN)
	install -m 755 $(BIN) $(I_BIN)/reprise
	install -m 755 $(SO).$(VERSION) $(I_LIB)/
	ln -sf libreprise.so.$(VERSION) $(I_LIB)/$(SONAME)
	ln -sf libreprise.so.$(VERSION) $(I_LIB)/libreprise.so
	install -m 644 $(LIB) $(I_LIB)/
	install -m 644 include/reprise.h include/reprise_tools.h $(I_INC)/
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: reprise' 'Description: GGUF inference where the layers a model runs are a plan over weights stored once' \
	  'Version: $(VERSION)' 'Requires.private: $(PKGS)' \
	  'Libs: -L$${libdir} -lreprise $(PC_SAN)' 'Libs.private: $(filter-out $(PKG_LIBS),$(LDLIBS))' \
	  'Cflags: -I$${includedir} $(PC_SAN)' > $(I_LIB)/pkgconfig/reprise.pc
	install -m 644 $(BUILD)/reprise.1 $(I_MAN)/

uninstall:
	rm -f $(I_BIN)/reprise $(I_LIB)/libreprise.so $(I_LIB)/$(SONAME) $(I_LIB)/libreprise.so.$(VERSION) \
	  $(I_LIB)/libreprise.a $(I_INC)/reprise.h $(I_INC)/reprise_tools.h \
	  $(I_LIB)/pkgconfig/reprise.pc $(I_MAN)/reprise.1
