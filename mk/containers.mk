# containers.mk - the container images of deploy/kubernetes/Containerfile, built with podman,
# and the container test (tests/containers/cluster.sh: the Indexed Job's pods as containers on
# a podman network). No registry is needed: the Debian 12 base image is made here by
# debootstrap from Debian's archive and imported into podman (tools/container-base.sh); apt
# inside the build reaches the same archive. docs/KUBERNETES.md.
#
#   make images           the base (once; kept in podman's storage), then chorus and
#                         chorus-torch (podman's layer cache keeps the package steps)
#   make container-test   images, then the job in containers: 2 pods x 2 ranks (allreduce,
#                         chorus-train on Fashion-MNIST, a DDP script on backend "chorus"),
#                         and a pod killed mid-run. Minutes: not part of make test.
#
# Packages: podman (the engine: daemonless, builds and runs as root here, reads Kubernetes
# manifests with `podman kube play`), runc (its runtime here: crun, podman's default, cannot
# set up containers under this machine's cgroup layout), debootstrap (the base image from
# Debian's archive, the only source reachable without a registry). The container test also
# needs kubectl 1.24 or later on PATH (kubectl kustomize with replacements renders the Job it
# runs); Debian's kubernetes-client is 1.20, too old, so it is not installed from here.
CONTAINER_PKGS = podman runc debootstrap
PODMAN        ?= podman --runtime runc --cgroup-manager cgroupfs
CHORUS_BASE   ?= localhost/chorus-base:bookworm
DEBIAN_MIRROR ?= http://deb.debian.org/debian
IMAGE_TAG     ?= latest

.PHONY: images container-base container-test deps-containers
deps-containers:
	@sh tools/deps.sh "the container images (make images, make container-test)" $(CONTAINER_PKGS)

container-base: deps-containers
	@PODMAN="$(PODMAN)" sh tools/container-base.sh $(CHORUS_BASE) $(DEBIAN_MIRROR)

images: container-base
	$(PODMAN) build --build-arg BASE=$(CHORUS_BASE) --target chorus -t localhost/chorus:$(IMAGE_TAG) \
	    -f deploy/kubernetes/Containerfile .
	$(PODMAN) build --build-arg BASE=$(CHORUS_BASE) --target chorus-torch \
	    -t localhost/chorus-torch:$(IMAGE_TAG) -f deploy/kubernetes/Containerfile .

# python3-yaml: tests/containers/pod_args.py reads the rendered manifests.
container-test: images
	@sh tools/deps.sh "the container test (make container-test)" python3-yaml
	PODMAN="$(PODMAN)" IMAGE_TAG=$(IMAGE_TAG) bash tests/containers/container_test.sh
