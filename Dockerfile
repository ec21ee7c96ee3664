# One image for the fleet: the default command starts a worker; `prism ...` runs the producer.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY prism ./prism
COPY producer ./producer
COPY tasks ./tasks
COPY workers ./workers
RUN pip install -c constraints.txt . \
    && useradd --uid 10001 --create-home prism
USER prism

# Celery's warm shutdown: SIGTERM lets running jobs finish; unfinished ones are redelivered.
STOPSIGNAL SIGTERM
CMD ["celery", "-A", "workers.app", "worker", "--loglevel", "INFO", "--concurrency", "4"]
