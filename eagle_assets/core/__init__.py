"""What every stage shares, importing nothing else of the package: the storage layout (every asset
folder and file name, the stage order), crash-safe files and content hashes, asset-check results,
child processes."""
