# GPU image for a Hugging Face Docker Space or a GPU host: the playground's Gradio app with vLLM in-process.
# Not verified on GPU.
#   docker build -t eagle-playground .
#   docker run --gpus all -p 7860:7860 -e HF_TOKEN=hf_... eagle-playground
# Presets: PLAYGROUND_PRESETS / PLAYGROUND_DEFAULT_PRESET (e.g. -e PLAYGROUND_DEFAULT_PRESET=llama-3.1-8b-vllm);
# a remote server: -e PLAYGROUND_REMOTE_URL=http://host:8000. vLLM pins its own torch and transformers (< 5.20; the
# local engine runs on it too, not verified in this image); the default pair runs here through vLLM (smollm2-135m-vllm).
ARG VLLM_VERSION=v0.32.0
FROM vllm/vllm-openai:${VLLM_VERSION}

# The base image's entrypoint is `vllm serve`; this image runs the app.
ENTRYPOINT []
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Spaces run containers as uid 1000 (named user here; Ubuntu 24.04 bases already have a user with that uid).
RUN if id -u 1000 >/dev/null 2>&1; then userdel -r "$(id -nu 1000)"; fi \
    && useradd -m -u 1000 user

# The app's packages, keeping the image's vLLM, torch and transformers exactly as they are.
COPY requirements-vllm.txt /tmp/requirements-vllm.txt
RUN python3 -m pip freeze | grep -iE '^(vllm|torch|transformers)==' > /tmp/constraints.txt \
    && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir -c /tmp/constraints.txt \
        -r /tmp/requirements-vllm.txt

USER 1000
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    HF_HOME=/home/user/.cache/huggingface \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    PLAYGROUND_PRESETS=smollm2-135m-vllm,llama-3.1-8b-vllm,remote \
    PLAYGROUND_DEFAULT_PRESET=smollm2-135m-vllm
WORKDIR /home/user/app

# Embedded models first (they change least), then the code.
COPY --chown=1000:1000 assets/ assets/
COPY --chown=1000:1000 playground/ playground/
COPY --chown=1000:1000 app.py ./

EXPOSE 7860
CMD ["python3", "app.py"]
