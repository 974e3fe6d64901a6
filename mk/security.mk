# security.mk - authenticated connections (src/wire/auth.c): HMAC-SHA256 and random nonces
# from libsodium. libchorus links it; chorus.pc lists it in Libs.private. It belongs to the
# core tier: a vetted library rather than hand-written cryptography, small, with a stable ABI
# and packaged by every distribution.
LIB_LDLIBS  += -lsodium
CORE_PKGS   += libsodium-dev
