"""DeepSpeed-style JSON config: read once, keys picked by the areas that own them."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from dslaunch.errors import DslaunchError
from dslaunch.inputs import userfiles


class ConfigError(DslaunchError):
    pass


def load_config(path: str) -> dict[str, Any]:
    try:
        data = json.loads(userfiles.read_text(path, "config"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path!r}: {exc.strerror}") from None
    except userfiles.UserFileError as exc:
        raise ConfigError(exc.message) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config {path!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path!r} must hold a JSON object, not {type(data).__name__}")
    return data


# ---- known keys ---------------------------------------------------------------------------------
# One table of the top-level keys a --config file may hold. dslaunch reads DSLAUNCH_KEYS (the value
# says where); DEEPSPEED_KEYS are read by the DeepSpeed engine from the same file and passed through
# quietly; anything else is warned once by the launcher (never an error). docs/migration.md lists
# both; tests/inputs/test_config_keys.py keeps the two in step.

DSLAUNCH_KEYS: dict[str, str] = {
    "log_level": "cli/log_options.py: logging spec for every process",
    "wall_clock_breakdown": "cli/log_options.py, bootstrap/timers.py: the timers channel prints at the default level",
    "steps_per_print": "cli/log_options.py, bootstrap/timers.py: the timers channel reports every N steps",
    "comms_logger": "cli/log_options.py: 'enabled' turns the per-op collective summary on",
    "hang_timeout": "cli/core_options.py: --hang-timeout when not given (docs/hangs.md)",
    "mesh": "mesh.py: dslaunch's own mesh section",
    "mesh_param": "mesh.py: [dp, sp]",
    "data_parallel_size": "mesh.py: dp",
    "sequence_parallel_size": "mesh.py: sp",
    "tensor_parallel": "mesh.py: 'autotp_size' is tp",
    "preload": "cli/core_options.py: --preload (modules each node imports once, then forks ranks from)",
}

# DeepSpeed's documented top-level keys (docs/_pages/config-json.md and runtime/config.py, 0.19.x),
# less those dslaunch reads itself.
DEEPSPEED_KEYS: frozenset[str] = frozenset(
    {
        "activation_checkpointing",
        "aio",
        "amp",
        "autotuning",
        "bf16",
        "bfloat16",
        "checkpoint",
        "comet",
        "communication_data_type",
        "compile",
        "compression_training",
        "csv_monitor",
        "curriculum_learning",
        "data_efficiency",
        "data_types",
        "dataloader_drop_last",
        "datastates_ckpt",
        "disable_allgather",
        "dump_state",
        "eigenvalue",
        "elasticity",
        "expert_parallel",
        "flops_profiler",
        "fp16",
        "gradient_accumulation_steps",
        "gradient_allreduce_op",
        "gradient_clipping",
        "gradient_predivide_factor",
        "graph_harvesting",
        "hybrid_engine",
        "managed_gradient_accumulation",
        "memory_breakdown",
        "nebula",
        "optimizer",
        "pipeline",
        "prescale_gradients",
        "progressive_layer_drop",
        "scheduler",
        "seq_parallel_communication_data_type",
        "sparse_attention",
        "sparse_gradients",
        "tensorboard",
        "timers",
        "torch_autocast",
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "use_data_before_expert_parallelism",
        "wandb",
        "weight_quantization",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "zero_optimization",
    }
)


def classify(key: str) -> str:
    """'dslaunch' (read by dslaunch), 'deepspeed' (passed through quietly) or 'unknown'."""
    if key in DSLAUNCH_KEYS:
        return "dslaunch"
    return "deepspeed" if key in DEEPSPEED_KEYS else "unknown"


def unknown_key_warnings(config: Mapping[str, Any]) -> list[str]:
    """One line per top-level key neither dslaunch nor DeepSpeed reads, with the closest known key."""
    known = sorted({*DSLAUNCH_KEYS, *DEEPSPEED_KEYS})
    out = []
    for key in config:
        if classify(key) != "unknown":
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else " to dslaunch or DeepSpeed; it is ignored"
        out.append(f"dslaunch: warning: config key {key!r} is not known{hint}")
    return out


def steps_per_print(config: Mapping[str, Any]) -> int | None:
    """The config's ``steps_per_print`` (a positive whole number), None when absent; ConfigError if bad."""
    value = config.get("steps_per_print")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config key steps_per_print must be a positive whole number, not {value!r}")
    return value


def hang_timeout(config: Mapping[str, Any]) -> float | None:
    """The config's ``hang_timeout`` (seconds above 0), None when absent; ConfigError if bad."""
    value = config.get("hang_timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400 * 7:
        raise ConfigError(f"config key hang_timeout must be a number of seconds above 0, not {value!r}")
    return float(value)
