"""Build recipes: `recipes/<package>/recipe.toml`, declarative data for the one builder."""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import UserError
from verlenv.fsutil import read_toml
from verlenv.native import sources

ARCH_FORMATS = ("nodot", "dotted")  # "80;90" (flash-attn, TE) or "8.0;9.0" (TORCH_CUDA_ARCH_LIST)
# "major": any nvcc of torch's CUDA major, the exact minor preferred (torch's own rule); "exact": only torch's
# major.minor, for a package whose build refuses another minor itself (apex).
NVCC_MATCHES = ("major", "exact")


@dataclass(frozen=True)
class Recipe:
    path: Path
    package: str
    import_name: str
    extension_modules: tuple[str, ...]
    source: sources.Source  # a PyPI sdist, a git commit or a local folder: sources.KINDS
    requires: tuple[str, ...]
    arch_variable: str | None
    arch_format: str
    threads_variable: str | None
    jobs_variable: str
    # setup.py builds this many extensions at once, each running jobs_variable compile jobs.
    concurrent_extensions_variable: str | None
    # How many units most of its extensions have (0: unknown); used to fill the cores with extensions.
    units_per_extension: int
    # False: host C++ only (kernels live in a prebuilt core library): no archs, no cubins expected.
    gpu_code: bool
    mem_per_job_gib: float
    mem_per_extra_thread_gib: float
    env: dict[str, str]
    # Search-path variables (CPATH, ...) to prepend with folders inside the env's site-packages.
    site_paths: dict[str, tuple[str, ...]]
    pip_args: tuple[str, ...]
    nvcc_match: str = "major"
    # The archs setup.py always compiles, for a package whose setup.py has no arch knob (causal-conv1d): the requested
    # archs must be among them, and one build serves every request.
    fixed_archs: tuple[str, ...] = ()
    # CUDA toolkit headers its sources include that not every CUDA_HOME has, each with the PyPI wheel that ships it
    # (PyPI's compiler wheels lack cuda_profiler_api.h): checked before anything compiles, so such a build fails in
    # one line, not after an hour.
    toolkit_headers: dict[str, str] = field(default_factory=dict)
    # Kernels for some archs only (data/gpu_code.toml [compiles]): a build for others carries none for them, instead
    # of being refused (FlashInfer's ahead-of-time modules; FlashInfer compiles at first use where none is carried).
    arch_subset: bool = False
    # Its compiler links -lcuda (FlashInfer's JIT): a CUDA_HOME assembled from PyPI's wheels gets the link stub.
    libcuda_link_stub: bool = False

    @property
    def digest(self) -> str:
        """The recipe's own content is part of the build fingerprint."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def archs_built(self, archs: list[str]) -> list[str]:
        """The archs a build compiles for `archs`: its fixed list, which must hold them all, or `archs` themselves."""
        if not self.fixed_archs:
            return archs
        if missing := [a for a in archs if a not in self.fixed_archs]:
            raise UserError(f"{self.package} cannot be built for {';'.join(missing)}: its setup.py compiles a fixed "
                            f"list ({';'.join(self.fixed_archs)}, {self.path})")
        return list(self.fixed_archs)

    def arch_value(self, archs: list[str]) -> str:
        return ";".join(a.replace(".", "") if self.arch_format == "nodot" else a for a in archs)


def recipes_dir(root: Path) -> Path:
    return root / "recipes"


def available(root: Path) -> list[str]:
    return sorted(p.parent.name for p in recipes_dir(root).glob("*/recipe.toml"))


def load(root: Path, package: str) -> Recipe:
    path = recipes_dir(root) / package / "recipe.toml"
    if not path.is_file():
        raise UserError(f"no recipe for {package!r}; recipes: {', '.join(available(root)) or 'none'}")
    data = read_toml(path)
    try:
        build = data["build"]
        source = data["source"]
        for key, table in (("build", build), ("source", source)):
            if not isinstance(table, dict):
                raise UserError(f"{path}: {key} must be a table ([{key}])")
        recipe = Recipe(
            path=path,
            package=data["package"],
            import_name=data["import_name"],
            extension_modules=tuple(data.get("extension_modules", [])),
            source=sources.from_table(source, data["package"], path),
            requires=tuple(build.get("requires", [])),
            arch_variable=build.get("arch_variable"),
            arch_format=build.get("arch_format", "dotted"),
            threads_variable=build.get("threads_variable"),
            jobs_variable=build.get("jobs_variable", "MAX_JOBS"),
            concurrent_extensions_variable=build.get("concurrent_extensions_variable"),
            units_per_extension=int(build.get("units_per_extension", 0)),
            gpu_code=bool(build.get("gpu_code", True)),
            mem_per_job_gib=float(build["mem_per_job_gib"]),
            mem_per_extra_thread_gib=float(build.get("mem_per_extra_thread_gib", 0.0)),
            env={k: str(v) for k, v in build.get("env", {}).items()},
            site_paths={k: tuple(v) for k, v in build.get("site_paths", {}).items()},
            pip_args=tuple(build.get("pip_args", [])),
            nvcc_match=build.get("nvcc_match", "major"),
            fixed_archs=tuple(str(a) for a in build.get("fixed_archs", [])),
            toolkit_headers={str(h): str(w) for h, w in build.get("toolkit_headers", {}).items()},
            arch_subset=_flag(build, "arch_subset", path),
            libcuda_link_stub=_flag(build, "libcuda_link_stub", path),
        )
    except KeyError as e:
        raise UserError(f"{path}: missing key {e.args[0]}") from None
    except (TypeError, ValueError, AttributeError) as e:
        # A value of another type than the recipe format's (a table for a string, a word for a number).
        raise UserError(f"{path}: malformed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                        f"compare it with recipes/flash-attn/recipe.toml") from None
    if recipe.gpu_code and not recipe.arch_variable and not recipe.fixed_archs:
        raise UserError(f"{path}: missing key build.arch_variable (or build.fixed_archs, or set build.gpu_code = "
                        "false)")
    if recipe.arch_variable and recipe.fixed_archs:
        raise UserError(f"{path}: build.arch_variable and build.fixed_archs exclude each other; keep the one setup.py "
                        "reads")
    if recipe.arch_subset and not recipe.arch_variable:
        raise UserError(f"{path}: build.arch_subset needs build.arch_variable (the knob its build reads archs from)")
    if recipe.arch_format not in ARCH_FORMATS:
        raise UserError(f"{path}: build.arch_format is {recipe.arch_format!r}; valid: {', '.join(ARCH_FORMATS)}")
    if recipe.nvcc_match not in NVCC_MATCHES:
        raise UserError(f"{path}: build.nvcc_match is {recipe.nvcc_match!r}; valid: {', '.join(NVCC_MATCHES)}")
    return recipe


def _flag(table: dict, key: str, path: Path) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"{path}: build.{key} is {value!r}; valid: true, false")
    return value
