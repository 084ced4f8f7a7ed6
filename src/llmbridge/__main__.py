"""`python -m llmbridge`: the same entry point as the `llmbridge` console script."""

from llmbridge.cli import main

if __name__ == "__main__":
    main()
