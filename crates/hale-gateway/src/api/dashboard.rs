//! The dashboard (docs/operations.md, "Dashboard"): `GET /` and its assets
//! under `/dashboard/`, compiled into the binary so the page works offline and
//! with no CDN.
//!
//! The page is a shell that holds no data: everything it shows comes from
//! the admin API (`/agents`, `/deployments`, `/nodes`, `/ready`, `/dlq`,
//! `/history`, `/turns/{id}`) and the live event stream (`/events`), each of
//! which needs an admin key when keys are configured. So the shell and its
//! assets are served to any caller the access rule lets in, and the page
//! asks for the admin token (kept in the tab's `sessionStorage`, sent as a
//! bearer header; never in a cookie or the URL). Without keys, the access
//! rule (loopback only) holds for the page as for every route.
//!
//! Front end: Preact through `htm` (one 13 KB ES module, components without a
//! compiler or build step) and uPlot for the charts (51 KB), vendored from
//! npm at the versions in `assets/dashboard/VENDOR.md`; `app.js` is ours.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One embedded file: its name under `/dashboard/`, media type and bytes.
struct Asset {
    name: &'static str,
    mime: &'static str,
    bytes: &'static [u8],
}

const INDEX: &[u8] = include_bytes!("../../assets/dashboard/index.html");

const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        mime: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/dashboard/app.js"),
    },
    Asset {
        name: "app.css",
        mime: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/dashboard/app.css"),
    },
    Asset {
        name: "preact-htm.js",
        mime: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/dashboard/preact-htm.js"),
    },
    Asset {
        name: "uplot.js",
        mime: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/dashboard/uplot.js"),
    },
    Asset {
        name: "uplot.css",
        mime: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/dashboard/uplot.css"),
    },
];

/// The page shell. `no-store`: a new binary's page is never mixed with an
/// old cached script.
pub(super) async fn index() -> Response {
    page(INDEX, "text/html; charset=utf-8")
}

pub(super) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => page(a.bytes, a.mime),
        None => crate::error::HaleError::not_found(format!("no dashboard asset {file}"))
            .into_response(hale_proto::Dialect::OpenAi),
    }
}

fn page(bytes: &'static [u8], mime: &'static str) -> Response {
    let mut resp = (StatusCode::OK, bytes).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    // The page loads only its own scripts and talks only to this origin.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
             img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    async fn body(resp: Response) -> Vec<u8> {
        to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("body")
            .to_vec()
    }

    #[tokio::test]
    async fn the_page_is_html_that_loads_only_its_own_scripts() {
        let resp = index().await;
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(
            h[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("script-src 'self'")
        );
        let html = String::from_utf8(body(resp).await).expect("utf-8");
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no CDN"
        );
    }

    #[tokio::test]
    async fn every_asset_the_page_or_app_names_is_served_with_its_type() {
        let page =
            String::from_utf8_lossy(INDEX).into_owned() + &String::from_utf8_lossy(ASSETS[0].bytes);
        let named: Vec<&str> = page
            .split("/dashboard/")
            .skip(1)
            .map(|rest| rest.split(['"', '\'']).next().unwrap_or(""))
            .collect();
        assert!(named.len() >= 4, "the page names its assets: {named:?}");
        for name in named {
            let resp = asset(Path(name.to_owned())).await;
            assert_eq!(resp.status(), StatusCode::OK, "{name}");
            let mime = resp.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_owned();
            assert!(
                (name.ends_with(".js") && mime.starts_with("text/javascript"))
                    || (name.ends_with(".css") && mime.starts_with("text/css")),
                "{name}: {mime}"
            );
            assert!(!body(resp).await.is_empty(), "{name} is not empty");
        }
    }

    #[tokio::test]
    async fn an_unknown_asset_is_a_json_404() {
        let resp = asset(Path("../Cargo.toml".into())).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        let v: serde_json::Value = serde_json::from_slice(&body(resp).await).expect("json");
        assert_eq!(v["error"]["type"], "not_found");
    }
}
