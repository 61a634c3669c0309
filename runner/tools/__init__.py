"""Tools for the people who work on the runner (the report's timing in Chromium): the top
floor, free to import any step and any backend; no step imports them."""
