"""A chat page at `/`: a person asks and rates in a browser, through the same API an app would use."""

from __future__ import annotations

from importlib import resources as package_files

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()
PAGE = package_files.files("rmi_pipeline.serving").joinpath("page.html").read_text()  # read once, not per visit


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page() -> str:
    return PAGE
