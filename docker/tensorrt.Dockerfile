# deploycc with TensorRT for x86-64 NVIDIA GPUs (target gpu-trt10), from NVIDIA's container.
# Build: docker build -f docker/tensorrt.Dockerfile --build-arg TRT_TAG=25.01-py3 -t deploycc:trt .
# Run:   docker run --rm --gpus all -v "$PWD:/work" deploycc:trt build model.onnx -t gpu-trt10 -o out
ARG TRT_TAG=25.01-py3
FROM nvcr.io/nvidia/tensorrt:${TRT_TAG}

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /opt/deploycc
COPY pyproject.toml README.md ./
COPY deploycc ./deploycc
COPY targets ./targets
# The image ships TensorRT's Python bindings; cuda-python comes with the extra.
RUN python3 -m pip install --no-cache-dir ".[tensorrt]"

WORKDIR /work
ENTRYPOINT ["deploycc"]
CMD ["--help"]
