"""The run viewer: a run's evidence as pages a browser opens, each question's rows on their cited
page with the passage marked, served on 127.0.0.1 (`prism view RUN_ID`) or written as static
files that open from disk or any static host (`prism view RUN_ID --out DIR`)."""
