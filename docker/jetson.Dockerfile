# deploycc on Jetson (Nano/Xavier/Orin) from NVIDIA's L4T TensorRT images: builds the engine of
# a device bundle on the board itself.
# JetPack 5 (L4T r35): docker build -f docker/jetson.Dockerfile --build-arg L4T_TAG=r8.5.2.2-devel -t deploycc:jp5 .
# JetPack 6 (L4T r36): docker build -f docker/jetson.Dockerfile --build-arg L4T_TAG=r10.3.0-devel -t deploycc:jp6 .
# Run: docker run --rm --runtime nvidia -v "$PWD:/work" deploycc:jp5 build out/bundle --engine-only
ARG L4T_TAG=r8.5.2.2-devel
FROM nvcr.io/nvidia/l4t-tensorrt:${L4T_TAG}

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /opt/deploycc
COPY pyproject.toml README.md ./
COPY deploycc ./deploycc
COPY targets ./targets
# TensorRT's bindings come with the L4T image; jetson-stats reads power and memory on the board.
RUN python3 -m pip install --no-cache-dir ".[jetson]" "cuda-python>=12"

WORKDIR /work
ENTRYPOINT ["deploycc"]
CMD ["--help"]
