# cohort in a container: the library and its CMake package, cohortrun, cohort-doctor, the examples
# and the benchmarks (and the Python package, when the tree has one), on NVIDIA's CUDA runtime
# image, which brings NCCL and cuDNN. docs/cloud.md says how to run it on rented GPU nodes.
#
#   docker build -t cohort .                          # CUDA 13.0.2, kernels for sm_80 and sm_90
#   docker run --rm --gpus all cohort                 # cohort-doctor: is this node fit to train?
#   docker run --rm --gpus all --ipc=host --ulimit memlock=-1 cohort \
#     cohortrun --nproc-per-node 8 train_mlp
#
# Two stages: `build` compiles on the CUDA devel image; the final stage is the matching runtime
# image plus /opt/cohort (no compiler, no build tree). Both bases are arguments: a base without
# nvcc builds the host flavor (Gloo on CPUs, the `host-only` preset), which scripts/test.sh
# builds and tests on a Debian base of its own (tests/containers/containers.sh):
#
#   docker build --build-arg BUILD_BASE=debian:bookworm --build-arg RUNTIME_BASE=debian:bookworm .
#
# The build stage is Debian or Ubuntu (it installs its compilers and libraries with apt-get), and
# the runtime base must be the same distribution and release: the libraries cohort's programs
# load beyond those the base provides (Gloo, OpenBLAS, ...) are copied from the build stage.

ARG CUDA_VERSION=13.0.2
ARG BUILD_BASE=docker.io/nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu24.04
ARG RUNTIME_BASE=docker.io/nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu24.04

FROM ${BUILD_BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake ninja-build g++ pkg-config ccache file \
      libgloo-dev libcli11-dev nlohmann-json3-dev libopenblas-dev libbenchmark-dev \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
# The arguments of the build come after the packages, so that none of them invalidates that layer.
ARG BUILD_BASE
# Extra CMake arguments. Warnings stay warnings here: a newer compiler than CI's must not fail an
# image build over a new warning (scripts/test.sh turns them back into errors for its build).
ARG COHORT_CMAKE_ARGS="-DCOHORT_WARNINGS_AS_ERRORS=OFF"
# The CMake preset: empty for `default` (sm_80 and sm_90) where nvcc is found, else `host-only`.
ARG COHORT_PRESET=""
ARG CUDA_ARCHITECTURES=""
ARG JOBS=""
# Where the sources are built. scripts/test.sh passes its own checkout's path, so that ccache
# (through CCACHE_DIR and CCACHE_CONFIGPATH, a cache of the host's mounted with `podman build -v`)
# serves the objects its host-only stage compiled.
ARG COHORT_SOURCE_DIR=/src/cohort
ARG CCACHE_DIR
ARG CCACHE_CONFIGPATH
# pip's settings, for the build dependencies of the Python package (a proxy's CA, a mirror).
ARG PIP_CERT
ARG PIP_INDEX_URL
# The compiles' locale, which ccache hashes too (scripts/test.sh passes its own).
ARG LANG=C.UTF-8
ARG LC_ALL
ARG LC_CTYPE
ARG LC_MESSAGES
WORKDIR ${COHORT_SOURCE_DIR}
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache scripts/container-build.sh /opt/cohort

FROM ${RUNTIME_BASE}
ARG BUILD_BASE
ARG RUNTIME_BASE
# What the runtime stage installs with apt-get: rdma-core's verbs library and providers, which
# NCCL loads for InfiniBand and RoCE (the CUDA images lack them), and whatever the build stage
# asked for (python3 when the image holds the Python package).
ARG RUNTIME_PACKAGES="ibverbs-providers"
COPY --from=build /opt/cohort/share/cohort/image/runtime-packages /tmp/cohort-runtime-packages
RUN packages="${RUNTIME_PACKAGES} $(cat /tmp/cohort-runtime-packages)"; \
    if [ -n "$(echo $packages)" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $packages \
      && apt-get clean && rm -rf /var/lib/apt/lists/*; \
    fi; \
    rm /tmp/cohort-runtime-packages
COPY --from=build /opt/cohort /opt/cohort
RUN echo /opt/cohort/lib/deps >/etc/ld.so.conf.d/cohort.conf && ldconfig \
 && cat /opt/cohort/share/cohort/image/versions
ENV PATH=/opt/cohort/bin:/opt/cohort/libexec/cohort:${PATH} \
    PYTHONPATH=/opt/cohort/python \
    CMAKE_PREFIX_PATH=/opt/cohort
LABEL org.opencontainers.image.title="cohort" \
      org.opencontainers.image.description="Data-parallel training on many GPUs (NCCL) or CPUs (Gloo)" \
      org.cohort.build-base="${BUILD_BASE}" \
      org.cohort.runtime-base="${RUNTIME_BASE}"
CMD ["cohort-doctor"]
