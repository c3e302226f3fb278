"""Environment and flags -> one frozen `Config` (CONTRACT §3).

This package is the only reader of the process environment, through the
mapping the commands hand to it (boundary.py). Every variable also has a
flag; a flag that was given wins over the environment, and its default is
written once, in `VARS`. A bad value raises `ConfigError` naming the
variable (never echoing a secret's value) before any I/O, so the cache is
left untouched.

Values the old scripts tolerated keep their old meaning instead (#14:
the operator may send them, also through `envFrom` of the source Secret): a
blank line inside MODEL_FILES, a PROGRESS_INTERVAL that is not a positive
number, an unknown LLMKUBE_REFRESH_POLICY, any LLMKUBE_PREFETCH_STAGER other
than exactly `true`. They are not errors but `Config.warnings`, which the
boundary logs once its logger exists.

One module an idea (#32 item 2), the arrows pointing down:

  load.py        the assembly: load_config, secret_values, early_settings,
                 inspect_target
  rules.py       each variable's rule; paths.py: path checks, the model's files
  reader.py      flag > environment > default, the kinds of value, `shown`
  kserve_env.py  KServe's variables mapped onto the agent's
  settings.py    the value types: Config, Timeouts, Secrets
  variables.py   the variable table, VARS

Every public name is imported from here (`llmkube_stager.config`).
"""

from llmkube_stager.config.kserve_env import KSERVE_CA_MOUNT_DEFAULT, KSERVE_VARS, with_kserve
from llmkube_stager.config.load import (
    early_log_level,
    early_settings,
    inspect_target,
    load_config,
    remedy_words,
    secret_values,
)
from llmkube_stager.config.rules import (
    URL_MAX_BYTES,
    load_aws_env,
    load_proxy,
    load_secrets,
    load_timeouts,
)
from llmkube_stager.config.settings import (
    MAX_CONNECTIONS,
    MAX_FILES_IN_FLIGHT,
    MAX_SHARDS,
    Config,
    DirectIoMode,
    LogFormat,
    MirrorSettings,
    RefreshPolicy,
    Secrets,
    Timeouts,
)
from llmkube_stager.config.variables import (
    AWS_ENV_VARS,
    AWS_PASSTHROUGH_VARS,
    DEFAULTS,
    SECRET_VARS,
    VARS,
    Var,
    unknown_variables,
)

__all__ = [
    "AWS_ENV_VARS",
    "AWS_PASSTHROUGH_VARS",
    "DEFAULTS",
    "KSERVE_CA_MOUNT_DEFAULT",
    "KSERVE_VARS",
    "MAX_CONNECTIONS",
    "MAX_FILES_IN_FLIGHT",
    "MAX_SHARDS",
    "SECRET_VARS",
    "URL_MAX_BYTES",
    "VARS",
    "Config",
    "DirectIoMode",
    "LogFormat",
    "MirrorSettings",
    "RefreshPolicy",
    "Secrets",
    "Timeouts",
    "Var",
    "early_log_level",
    "early_settings",
    "inspect_target",
    "load_aws_env",
    "load_config",
    "load_proxy",
    "load_secrets",
    "load_timeouts",
    "remedy_words",
    "secret_values",
    "unknown_variables",
    "with_kserve",
]
