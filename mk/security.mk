# security.mk - authenticated connections (src/wire/auth.c): HMAC-SHA256 and random nonces
# from libsodium. libchorus links it; chorus.pc lists it in Libs.private.
LIB_LDLIBS  += -lsodium
DEBIAN_PKGS += libsodium-dev
