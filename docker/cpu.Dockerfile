# deploycc for CPU targets (ort-cpu, openvino-cpu); also writes TensorRT device bundles.
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 -f docker/cpu.Dockerfile .
# Run:        docker run --rm -v "$PWD:/work" deploycc:cpu build model.onnx -t openvino-cpu -o out
FROM python:3.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /opt/deploycc
COPY pyproject.toml README.md ./
COPY deploycc ./deploycc
COPY targets ./targets
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 1000 deploycc

USER 1000
WORKDIR /work
ENTRYPOINT ["deploycc"]
CMD ["--help"]
