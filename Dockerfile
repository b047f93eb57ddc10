# One image for every gapwatch service: the dashboard, the watch service and the trainer.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WANDB_ERROR_REPORTING=false

WORKDIR /opt/gapwatch
# Dependencies first, so a code change does not reinstall them: the core and the trainer extra (the
# compose file's demo trainer), at the exact versions the tests passed with.
COPY pyproject.toml README.md constraints.txt ./
RUN mkdir -p monitor evals trainer app && touch monitor/__init__.py evals/__init__.py \
        trainer/__init__.py app/__init__.py \
    && pip install -c constraints.txt '.[trainer]' \
    && pip uninstall -y gapwatch
COPY monitor monitor
COPY evals evals
COPY trainer trainer
COPY app app
RUN pip install --no-deps .

RUN useradd --create-home --uid 10001 gapwatch
USER gapwatch
# Checkpoints, spool files and the eval-data cache live under the user's data and cache dirs.
VOLUME ["/home/gapwatch/.local/share/gapwatch", "/home/gapwatch/.cache/gapwatch"]
ENTRYPOINT ["gapwatch"]
CMD ["--help"]
