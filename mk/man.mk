# man.mk - manual pages of the tools, made by help2man (Debian package help2man) from each
# tool's --help and --version, so a page says what the tool itself says; built into
# $(BUILD)/man and installed into $(MANDIR)/man1 by make install.
#
#   make man        $(BUILD)/man/chorus-run.1, chorus-bench.1, chorus-train.1
#   man -l build/man/chorus-run.1

MAN_PKGS   = help2man
MAN_TOOLS  = chorus-run chorus-bench chorus-train
MAN_PAGES  = $(MAN_TOOLS:%=$(BUILD)/man/%.1)
DEBIAN_PKGS += $(MAN_PKGS)
# the NAME line of each page
man_name_chorus-run   = start the ranks of a Chorus job on this host or across hosts
man_name_chorus-bench = measure and verify Chorus collectives, nccl-tests style
man_name_chorus-train = train on Fashion-MNIST with data-parallel gradient averaging

.PHONY: man deps-man install-man uninstall-man print-installed-man
man: $(MAN_PAGES)
deps-man:
	@sh tools/deps.sh "the manual pages (make man, make install)" $(MAN_PKGS)

$(BUILD)/man/%.1: $(BUILD)/bin/% | deps-man
	@mkdir -p $(dir $@)
	help2man --no-info --no-discard-stderr --name='$(man_name_$*)' \
	    $(addprefix --include=,$(filter %.h2m,$^)) --output=$@ $(abspath $<)

# chorus-run's page also has an ENVIRONMENT section: the CHORUS_* variables as
# chorus-run --help-env prints them (kept as printed, in a no-fill block).
$(BUILD)/man/chorus-run.1: $(BUILD)/man/chorus-run.h2m
$(BUILD)/man/chorus-run.h2m: $(BUILD)/bin/chorus-run
	@mkdir -p $(dir $@)
	{ printf '[ENVIRONMENT]\nThe CHORUS_* variables every rank reads (docs/ENVIRONMENT.md says more):\n.PP\n.nf\n'; \
	  $(abspath $<) --help-env | sed 's/\\/\\e/g; s/^[.'"'"']/\\\&&/'; printf '.fi\n'; } > $@

install: install-man
install-man: $(MAN_PAGES)
	install -d $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/

uninstall: uninstall-man
uninstall-man:
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(MAN_TOOLS:%=%.1))

# The pages' paths under PREFIX (with the default MANDIR), for the install test.
print-installed-man:
	@echo $(MAN_TOOLS:%=share/man/man1/%.1)
