from kvplan.cli import app

app(prog_name="kvplan")
