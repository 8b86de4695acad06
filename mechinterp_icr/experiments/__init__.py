"""Paper reproductions as pipelines. Each target module exposes
``reproduce(profile: str, out_dir: Path, seeds: list[int], overrides: list[str]) -> Summary``."""
